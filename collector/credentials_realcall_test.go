package collector

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/testutil"
)

// A call that holds a brokered secret and spreads it everywhere it can (its output, an exec's
// arguments, a path it opens, its own command line) is shipped to ClickHouse: no row of any
// table holds the value or its base64, and the credential's events are there by name and
// fingerprint.
func TestShippedCallHoldsNoSecret(t *testing.T) {
	testutil.RequireRoot(t, "berm run creates cgroups and namespaces and loads eBPF")
	s := server(t)
	dsn := freshDB(t, s)
	b := make([]byte, 12)
	rand.Read(b)
	secret := "chsecret-" + hex.EncodeToString(b)
	dir := t.TempDir()
	src := filepath.Join(dir, "secret")
	os.WriteFile(src, []byte(secret), 0o600)
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(fmt.Sprintf("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: ch}\nspec:\n  credentials:\n    - {name: db, source: {file: %s}, deliver: {env: DB_TOKEN}}\n", src)), 0o600)
	state := t.TempDir()
	ws := bermbin.Workspace(t)
	out, err := exec.Command(bermbin.Path(t, "berm"), "run", "--state-dir", state, "--policy", pol, "--workspace", ws, "--call-id", "spreader", "--",
		"/bin/sh", "-c", `echo "$DB_TOKEN"; /bin/echo "$DB_TOKEN" | base64; cat "/tmp/$DB_TOKEN"; ls "$DB_TOKEN"; true `+secret).CombinedOutput()
	if err != nil {
		t.Fatalf("berm run: %v\n%s", err, out)
	}
	if strings.Contains(string(out), secret) {
		t.Fatalf("the caller received the secret:\n%s", out)
	}
	c, _ := newCollector(t, state, dsn, nil)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	query := func(q string) string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/?query=%s", s.HTTPPort, url.QueryEscape(q)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", q, body)
		}
		return string(body)
	}
	tables := strings.Fields(query("SHOW TABLES FROM " + c.db))
	if len(tables) == 0 {
		t.Fatal("no tables")
	}
	all := ""
	for _, tb := range tables {
		rows := query(fmt.Sprintf("SELECT * FROM %s.%s FORMAT TSV", c.db, tb))
		all += rows
		for _, f := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret + "\n"))[:20], hex.EncodeToString([]byte(secret))} {
			if strings.Contains(rows, f) {
				t.Errorf("table %s holds the secret (%q)", tb, f)
			}
		}
	}
	for _, want := range []string{`"credential":{"name":"db","action":"issued"`, `"action":"leaked"`, "[berm:redacted:db]"} {
		if !strings.Contains(all, strings.ReplaceAll(want, `"`, `\"`)) && !strings.Contains(all, want) {
			t.Errorf("ClickHouse has no %s", want)
		}
	}
}
