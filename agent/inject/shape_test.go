package inject

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"testing"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// Each shape of injection puts the secret where its placeholder is in its own shape to its own
// hosts, and nowhere else; the placeholder anywhere else is misplaced.
func TestInjectShapesPutTheSecretOnlyWhereThePolicySays(t *testing.T) {
	const ph, secret = "sk-PLACEHOLDER1", "sk-real/secret+1"
	bearer := Credential{Name: "b", Value: []byte(secret), Placeholder: []byte(ph), Hosts: []string{"api.test"}, Header: "Authorization", Format: "Bearer {}"}
	basic := Credential{Name: "u", Value: []byte(secret), Placeholder: []byte(ph), Hosts: []string{"api.test"}, Header: "Authorization", Format: "Basic {}", BasicUser: "x-access-token"}
	query := Credential{Name: "q", Value: []byte(secret), Placeholder: []byte(ph), Hosts: []string{"api.test"}, Header: "Authorization", Format: "Bearer {}", Query: "key"}
	for _, tc := range []struct {
		name      string
		cr        Credential
		host, url string
		header    map[string]string
		// wantAuth and wantQuery: after injection; misplaced: refused instead
		wantAuth, wantQuery string
		misplaced           bool
	}{
		{"bearer in its header", bearer, "api.test", "/x", map[string]string{"Authorization": "Bearer " + ph}, "Bearer " + secret, "", false},
		{"bearer in the query", bearer, "api.test", "/x?key=" + ph, nil, "", "key=" + ph, true},
		{"basic with its user", basic, "api.test", "/x", map[string]string{"Authorization": "Basic " + b64("x-access-token:"+ph)}, "Basic " + b64("x-access-token:"+secret), "", false},
		{"basic with another user", basic, "api.test", "/x", map[string]string{"Authorization": "Basic " + b64("root:"+ph)}, "Basic " + b64("root:"+ph), "", false},
		{"basic as a bearer", basic, "api.test", "/x", map[string]string{"Authorization": "Bearer " + ph}, "", "", true},
		{"basic to another host", basic, "evil.test", "/x", map[string]string{"Authorization": "Basic " + b64("x-access-token:"+ph)}, "", "", true},
		{"query in its parameter", query, "api.test", "/x?a=1&key=" + ph + "&b=2", nil, "", "a=1&key=" + url.QueryEscape(secret) + "&b=2", false},
		{"query escaped in its parameter", query, "api.test", "/x?key=" + url.QueryEscape(ph), nil, "", "key=" + url.QueryEscape(secret), false},
		{"query in another parameter", query, "api.test", "/x?other=" + ph, nil, "", "", true},
		{"query twice, once elsewhere", query, "api.test", "/x?key=" + ph + "&k2=" + ph, nil, "", "", true},
		{"query inside its parameter's value", query, "api.test", "/x?key=a" + ph, nil, "", "", true},
		{"query in the path", query, "api.test", "/" + ph + "?key=" + ph, nil, "", "", true},
		{"query to another host", query, "evil.test", "/x?key=" + ph, nil, "", "", true},
		{"query in a header", query, "api.test", "/x", map[string]string{"Authorization": "Bearer " + ph}, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", "https://"+tc.host+tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			cr := tc.cr
			_, mis := (&Call{}).misplaced(req, &cr, tc.host)
			if mis != tc.misplaced {
				t.Fatalf("misplaced %v, want %v", mis, tc.misplaced)
			}
			if mis {
				return
			}
			if cr.Query != "" {
				q, _ := cr.putQuery(req.URL.RawQuery)
				if q != tc.wantQuery {
					t.Errorf("query %q, want %q", q, tc.wantQuery)
				}
				return
			}
			got, _ := cr.put(req.Header.Get("Authorization"))
			if got != tc.wantAuth {
				t.Errorf("Authorization %q, want %q", got, tc.wantAuth)
			}
		})
	}
}
