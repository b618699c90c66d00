package mcpserve

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/bermsec/berm/sandboxer"
)

// withRequestIDs reads each POST's body (at most max bytes: more is answered 413 with a
// JSON-RPC error) and puts each tools/call's id into its _meta, as the stdio transport does.
func withRequestIDs(next http.Handler, max int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, int64(max)+1))
		r.Body.Close()
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		if len(body) > max {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			w.Write(rpcError(nil, codeInvalidRequest, fmt.Sprintf("message of more than %d bytes", max)))
			return
		}
		trimmed := bytes.TrimSpace(body)
		if len(trimmed) > 0 && trimmed[0] == '{' {
			if env, rerr := parseEnvelope(trimmed); rerr == nil && env.Method == "tools/call" && env.isRequest() {
				body = withRequestID(env, trimmed)
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// tokenTable maps bearer tokens to tenants.
type tokenTable struct{ entries []tokenEntry }

type tokenEntry struct{ tenant, token string }

// loadTokens reads a token file: one "TENANT TOKEN" a line, # comments. The file must be
// readable by its owner only (it holds secrets), tokens at least 16 bytes.
func loadTokens(path string) (*tokenTable, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--tokens: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("--tokens: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--tokens %s: mode %04o: the file must be readable by its owner only", path, st.Mode().Perm())
	}
	t := &tokenTable{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("--tokens %s:%d: expected TENANT TOKEN", path, n)
		}
		if err := sandboxer.ValidName("tenant", fields[0]); err != nil {
			return nil, fmt.Errorf("--tokens %s:%d: %w", path, n, err)
		}
		if len(fields[1]) < 16 {
			return nil, fmt.Errorf("--tokens %s:%d: a token of fewer than 16 bytes", path, n)
		}
		t.entries = append(t.entries, tokenEntry{fields[0], fields[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--tokens: %w", err)
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("--tokens %s: no tokens", path)
	}
	return t, nil
}

// lookup compares against every token in constant time.
func (t *tokenTable) lookup(token string) (string, bool) {
	tenant, ok := "", false
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare([]byte(e.token), []byte(token)) == 1 {
			tenant, ok = e.tenant, true
		}
	}
	return tenant, ok
}

var _ = json.Marshal
