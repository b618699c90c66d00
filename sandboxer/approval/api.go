package approval

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The local API: GET /v1/approvals lists the pending requests, POST /v1/approvals/{id} with
// {"decision": "approve"|"deny", "reason": ..., "by": ...} decides one. Every request carries
// "Authorization: Bearer <token>", the token read from a root-only file. It is served on a
// unix socket in DefaultDir, one per process holding requests (bermd's, an embedded run's).
const (
	DefaultDir       = "/run/berm/approvals"
	DefaultTokenFile = "/etc/berm/approvals.token"
)

// PendingView is one row of GET /v1/approvals.
type PendingView struct {
	Request
	AgeSeconds float64 `json:"age_seconds"`
}

// DecideBody is POST /v1/approvals/{id}'s body.
type DecideBody struct {
	Decision string `json:"decision"` // approve or deny
	Reason   string `json:"reason,omitempty"`
	By       string `json:"by,omitempty"`
}

// Handler serves the API for b, checking the bearer token.
func Handler(b *Broker, token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/approvals", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		var out []PendingView
		for _, p := range b.List() {
			// With bermd's access, a caller sees only the tenants it may decide in.
			if b.decideAccess != nil && !isAdmin(r, token) && b.decideAccess(peerUID(r), p.Tenant) != nil {
				continue
			}
			out = append(out, PendingView{Request: p, AgeSeconds: p.Age(now).Seconds()})
		}
		if out == nil {
			out = []PendingView{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /v1/approvals/{id}", func(w http.ResponseWriter, r *http.Request) {
		var body DecideBody
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&body); err != nil {
			http.Error(w, "body: expected {\"decision\": \"approve\"|\"deny\", \"reason\": ...}", http.StatusBadRequest)
			return
		}
		if body.Decision != "approve" && body.Decision != "deny" {
			http.Error(w, "decision: expected approve or deny", http.StatusBadRequest)
			return
		}
		by, err := identify(r, b.approvers, token, body.By)
		if err != nil {
			var imp *impersonation
			if errors.As(err, &imp) {
				b.Refuse(r.PathValue("id"), body.Decision == "approve", imp.who, imp.claimed, ChannelAPI, body.Reason)
			} else {
				b.Unauthenticated(ChannelAPI)
			}
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		if b.decideAccess != nil && !isAdmin(r, token) {
			if tenant, ok := b.tenantOf(r.PathValue("id")); ok {
				if err := b.decideAccess(peerUID(r), tenant); err != nil {
					http.Error(w, err.Error(), http.StatusForbidden)
					return
				}
			}
		}
		if err := b.Decide(r.PathValue("id"), body.Decision == "approve", by, ChannelAPI, body.Reason); err != nil {
			code := http.StatusNotFound
			if errors.Is(err, ErrNotApprover) {
				code = http.StatusForbidden
			}
			http.Error(w, err.Error(), code)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authenticated(r, b.approvers, token) {
			if r.Method == http.MethodPost {
				b.Unauthenticated(ChannelAPI)
			}
			http.Error(w, "a bearer token (the root-only token file, or an approver's own) or the unix user of a listed approver is required", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

type peerKey struct{}

// peerUID is the API socket peer's uid (SO_PEERCRED), or -1.
func peerUID(r *http.Request) int {
	c, _ := r.Context().Value(peerKey{}).(*net.UnixConn)
	if c == nil {
		return -1
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return -1
	}
	uid := -1
	_ = raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			uid = int(cred.Uid)
		}
	})
	return uid
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if !strings.HasPrefix(h, "Bearer ") {
		return ""
	}
	return strings.TrimPrefix(h, "Bearer ")
}

func isAdmin(r *http.Request, token string) bool {
	return subtle.ConstantTimeCompare([]byte(bearer(r)), []byte(token)) == 1
}

// authenticated: the admin token, an approver's token, or the unix user of an approver.
func authenticated(r *http.Request, a *Approvers, token string) bool {
	if isAdmin(r, token) {
		return true
	}
	if _, ok := a.byToken(bearer(r)); ok {
		return true
	}
	_, ok := a.byUID(peerUID(r))
	return ok
}

// identify is who decides: root (the admin token) names them (claimed, default "root"); an
// approver's token or unix user is that approver, and may not claim another name.
func identify(r *http.Request, a *Approvers, token, claimed string) (string, error) {
	if isAdmin(r, token) {
		if claimed == "" {
			return "root", nil
		}
		return claimed, nil
	}
	who, ok := a.byToken(bearer(r))
	if !ok {
		who, ok = a.byUID(peerUID(r))
	}
	if !ok {
		return "", errors.New("no approver identity")
	}
	if claimed != "" && claimed != who {
		return "", &impersonation{who: who, claimed: claimed}
	}
	return who, nil
}

// impersonation is a decision by a token or unix user claiming another's name.
type impersonation struct{ who, claimed string }

func (e *impersonation) Error() string {
	return fmt.Sprintf("you are %s, not %s: only root names who decides", e.who, e.claimed)
}

// LoadToken reads the API token, creating it (32 random bytes, hex) when the file is absent.
// The file must be root's and readable by root only: a token others can read lets them
// approve.
func LoadToken(path string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	var buf [32]byte
	_, _ = rand.Read(buf[:])
	if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600); err == nil {
		_, werr := f.WriteString(hex.EncodeToString(buf[:]) + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return "", fmt.Errorf("write approval token %s: %w", path, werr)
		}
	}
	return ReadToken(path)
}

// ReadToken reads an existing token file, checking it is root-only.
func ReadToken(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", fmt.Errorf("approval token: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	if sys == nil || sys.Uid != 0 || st.Mode().Perm()&0o077 != 0 || !st.Mode().IsRegular() {
		return "", fmt.Errorf("approval token %s: expected a regular file owned by root with mode 0600, got %s", path, st.Mode())
	}
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(data))
	if len(tok) < 16 {
		return "", fmt.Errorf("approval token %s: too short", path)
	}
	return tok, nil
}

// Serve serves the API for b on a unix socket named name in dir (root-only), until the
// returned close function is called.
func Serve(b *Broker, token, dir, name string) (string, func() error, error) {
	// Root-only, unless approvers decide as unix users: then every user may find the
	// sockets (berm approve lists them) and connect, and each request is authenticated (a
	// token, or the peer's uid an approver has).
	mode := os.FileMode(0o700)
	if b.approvers.HasUsers() {
		mode = 0o755
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return "", nil, err
	}
	if err := os.Chmod(dir, mode); err != nil {
		return "", nil, err
	}
	sock := filepath.Join(dir, name+".sock")
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return "", nil, fmt.Errorf("approval API on %s: %w", sock, err)
	}
	if mode != 0o700 {
		if err := os.Chmod(sock, 0o666); err != nil {
			ln.Close()
			return "", nil, err
		}
	}
	hs := &http.Server{Handler: Handler(b, token), ReadHeaderTimeout: 5 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, peerKey{}, c) }}
	go func() { _ = hs.Serve(ln) }()
	return sock, func() error {
		err := hs.Close()
		_ = os.Remove(sock)
		return err
	}, nil
}

// Client talks to the API of every process serving one in Dir.
type Client struct {
	Dir   string
	Token string
}

func (c *Client) sockets() ([]string, error) {
	socks, err := filepath.Glob(filepath.Join(c.Dir, "*.sock"))
	if err != nil {
		return nil, err
	}
	return socks, nil
}

func (c *Client) do(sock, method, path string, body []byte) (*http.Response, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	req, err := http.NewRequest(method, "http://berm"+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	req.Header.Set("Content-Type", "application/json")
	return hc.Do(req)
}

// List returns the pending requests of every serving process. A socket nobody serves any
// more (its process died) is skipped.
func (c *Client) List() ([]PendingView, error) {
	socks, err := c.sockets()
	if err != nil {
		return nil, err
	}
	out := []PendingView{}
	for _, s := range socks {
		resp, err := c.do(s, http.MethodGet, "/v1/approvals", nil)
		if err != nil {
			continue
		}
		var got []PendingView
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			return nil, fmt.Errorf("%s: %s", s, resp.Status)
		}
		out = append(out, got...)
	}
	return out, nil
}

// Decide sends a decision to whichever process holds id.
func (c *Client) Decide(id string, approve bool, by, reason string) error {
	socks, err := c.sockets()
	if err != nil {
		return err
	}
	d := "deny"
	if approve {
		d = "approve"
	}
	body, _ := json.Marshal(DecideBody{Decision: d, Reason: reason, By: by})
	for _, s := range socks {
		resp, err := c.do(s, http.MethodPost, "/v1/approvals/"+id, body)
		if err != nil {
			continue
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusNoContent:
			return nil
		case http.StatusNotFound:
			if strings.Contains(string(msg), ErrUnknown.Error()) {
				continue
			}
			return fmt.Errorf("%s: %s: %s", s, resp.Status, strings.TrimSpace(string(msg)))
		default:
			return fmt.Errorf("%s: %s: %s", s, resp.Status, strings.TrimSpace(string(msg)))
		}
	}
	return fmt.Errorf("approval %s: %w", id, ErrUnknown)
}
