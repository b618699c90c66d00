package approval

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
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
		by := body.By
		if by == "" {
			by = "api"
		}
		if err := b.Decide(r.PathValue("id"), body.Decision == "approve", by, ChannelAPI, body.Reason); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "a bearer token is required (the root-only token file)", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
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
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", nil, err
	}
	sock := filepath.Join(dir, name+".sock")
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return "", nil, fmt.Errorf("approval API on %s: %w", sock, err)
	}
	hs := &http.Server{Handler: Handler(b, token), ReadHeaderTimeout: 5 * time.Second}
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
	req.Header.Set("Authorization", "Bearer "+c.Token)
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
			continue
		default:
			return fmt.Errorf("%s: %s: %s", s, resp.Status, strings.TrimSpace(string(msg)))
		}
	}
	return fmt.Errorf("approval %s: %w", id, ErrUnknown)
}
