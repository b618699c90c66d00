package sandboxer_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bermsec/berm/testenv/bermbin"
)

// hostCredentialStores are where the host keeps credentials a tool under a hostile prompt
// would go for: cloud CLIs, ssh, kube, docker, netrc, gpg, git, package managers, browsers.
var hostCredentialStores = []string{
	"/root/.aws/credentials", "/root/.config/gcloud/application_default_credentials.json", "/root/.azure/msal_token_cache.json",
	"/root/.ssh/id_ed25519", "/root/.kube/config", "/root/.docker/config.json", "/root/.netrc",
	"/root/.gnupg/private-keys-v1.d/berm-test.key", "/root/.git-credentials", "/root/.config/gh/hosts.yml",
	"/root/.npmrc", "/root/.pypirc", "/root/.cargo/credentials.toml", "/root/.gem/credentials",
	"/root/.mozilla/firefox/berm.default/logins.json", "/root/.config/google-chrome/Default/Login Data",
	"/home/berm-test-user/.aws/credentials", "/home/berm-test-user/.ssh/id_rsa",
	"/var/lib/kubelet/kubeconfig", "/run/secrets/berm-test-token",
	"/etc/docker/berm-test-key.json", "/etc/kubernetes/admin.conf", "/etc/rancher/k3s/k3s.yaml", "/etc/apt/auth.conf",
	"/etc/apt/auth.conf.d/berm-test.conf", "/etc/pip.conf", "/etc/npmrc", "/etc/netrc", "/etc/boto.cfg",
	"/etc/ssh/ssh_host_berm_test_key", "/etc/ssl/private/berm-test.key", "/usr/local/etc/npmrc",
}

// plant makes each store on the host (where missing) holding a marker, and removes what it made.
func plant(t *testing.T, marker string) {
	t.Helper()
	for _, p := range hostCredentialStores {
		if _, err := os.Lstat(p); err == nil {
			continue // the host's own: read by the call or not, it is not ours to change
		}
		var made []string
		for d := filepath.Dir(p); ; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil {
				break
			}
			made = append(made, d)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		// World-readable: only berm stands between the call and the file.
		if err := os.WriteFile(p, []byte(marker+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.Remove(p)
			for _, d := range made {
				os.Remove(d)
			}
		})
	}
}

// A call under the strict policy reads none of the host's credential stores, each one refused
// (not found in the call's root, or denied by Landlock), and cannot reach the cloud metadata
// address even with a policy that allows all of the internet's port 80.
func TestHostCredentialStoresStayOut(t *testing.T) {
	bermbin.RequireRoot(t)
	state, ws := t.TempDir(), bermbin.Workspace(t)
	marker := "berm-host-credential-marker"
	plant(t, marker)
	script := "for f in \"$@\"; do if cat \"$f\" >/dev/null 2>&1; then echo \"READ $f\"; else echo \"refused $f\"; fi; done; cat \"$@\" 2>/dev/null"
	args := append([]string{"run", "--state-dir", state, "--no-rules", "--workspace", ws, "--", "sh", "-c", script, "sh"}, hostCredentialStores...)
	r := bermbin.Berm(t, nil, args...)
	if strings.Contains(r.Stdout, marker) || strings.Contains(r.Stdout, "READ ") {
		t.Fatalf("a call read host credentials:\n%s", r.Stdout)
	}
	if n := strings.Count(r.Stdout, "refused "); n != len(hostCredentialStores) {
		t.Fatalf("%d refusals, want %d:\n%s\n%s", n, len(hostCredentialStores), r.Stdout, r.Stderr)
	}

	pol := credPolicy(t, "  isolation: {network: host-filtered, capabilities: []}\n  network:\n    egress:\n      - {cidr: 0.0.0.0/0, ports: [80]}\n")
	m := bermbin.Berm(t, nil, "run", "--state-dir", state, "--no-rules", "--policy", pol, "--call-id", "metadata", "--workspace", ws, "--",
		"python3", "-c", `import socket
s = socket.socket(); s.settimeout(3)
try:
    s.connect(("169.254.169.254", 80)); print("CONNECTED")
except OSError as e:
    print("refused", e.errno)`)
	if !strings.Contains(m.Stdout, "refused") {
		t.Fatalf("metadata address: %s %s", m.Stdout, m.Stderr)
	}
	tl := bermbin.Timeline(t, state, "metadata")
	denied := false
	for _, e := range tl.Events {
		if e.Denial != nil && strings.Contains(e.Denial.Object, "169.254.169.254") {
			denied = true
		}
	}
	if !denied {
		t.Fatal("no denial of the metadata address in the trail")
	}
}
