package event

// KindCredential is a brokered credential's life in the call: issued, delivered, revoked,
// leaked. Only its name and keyed fingerprint are recorded, never its value.
const KindCredential Kind = "credential"

// Credential actions (Credential.Action).
const (
	CredentialIssued    = "issued"    // read or minted for the call
	CredentialDelivered = "delivered" // handed to the tool (env or file)
	CredentialRevoked   = "revoked"   // its revoke command ran (Result says how it went), or its file was removed
	CredentialLeaked    = "leaked"    // its bytes (or an encoding of them) showed where they should not
	CredentialInjected  = "injected"  // berm's egress put it into a request of the tool's to one of its hosts (agent/inject)
	CredentialRefused   = "refused"   // berm's egress refused a request carrying its placeholder (Result says why)
)

// Credential is one step of a brokered credential. Fingerprint is HMAC-SHA256 of the value
// under the node's own key (hex, first 32 digits): the same secret has the same fingerprint on
// one node, and it tells nothing of the value without the key.
type Credential struct {
	Name        string `json:"name" ch:"rule,lc"`      // the credential's name in the policy
	Action      string `json:"action"`                 // issued, delivered, revoked, leaked
	Fingerprint string `json:"fingerprint" ch:"path"`  // keyed fingerprint of the value
	Source      string `json:"source,omitempty"`       // file, env or exec
	Delivery    string `json:"delivery,omitempty"`     // env NAME, or file PATH
	Result      string `json:"result,omitempty"`       // revoke: ok, or what failed; leaked: redacted, or recorded
	Where       string `json:"where,omitempty"`        // leaked: stdout, stderr, exec argv, path, ...
	Encoding    string `json:"encoding,omitempty"`     // leaked: raw, base64, base64url, hex, url, json
	OtherCall   string `json:"other_call,omitempty"`   // leaked: the call key of the call the secret was issued to, when not this one
	OtherTenant string `json:"other_tenant,omitempty"` // leaked: that call's tenant
	// injected, refused: the request berm's egress saw (never the value, nor the query)
	Host   string `json:"host,omitempty"`   // the host the request named (TLS SNI, Host)
	Method string `json:"method,omitempty"` // its method
	Path   string `json:"path,omitempty"`   // its path, without the query
	Status int    `json:"status,omitempty"` // the response's status code
	Bytes  int64  `json:"bytes,omitempty"`  // the response body's bytes the tool received
}

// CredentialUse is a credential the call received, in its record.
type CredentialUse struct {
	Name        string `json:"name"`              // the credential's name in the policy
	Fingerprint string `json:"fingerprint"`       // keyed fingerprint of the value
	Delivery    string `json:"delivery"`          // env NAME, or file PATH
	Revoked     string `json:"revoked,omitempty"` // ok, what failed, or empty when it has no revoke command
	Leaks       uint64 `json:"leaks,omitempty"`   // times it was found where it should not be
}
