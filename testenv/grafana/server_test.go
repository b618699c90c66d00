package grafana

import (
	"errors"
	"io"
	"net/http"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/testutil"
)

// TestServerStartStop starts the real Grafana (building it when it is not cached), reads its
// health and admin API, and checks that Stop leaves neither the process nor the port behind.
func TestServerStartStop(t *testing.T) {
	s := ForTest(t, Config{PluginsDir: t.TempDir(), Provisioning: t.TempDir()})
	var h struct {
		Database string `json:"database"`
		Version  string `json:"version"`
	}
	if err := s.Get("/api/health", &h); err != nil || h.Database != "ok" || h.Version == "" {
		t.Fatalf("health: %v %+v", err, h)
	}
	var org struct {
		Name string `json:"name"`
	}
	if err := s.Get("/api/org", &org); err != nil || org.Name == "" {
		t.Fatalf("the admin's org: %v %+v", err, org)
	}
	s.Password = "wrong"
	var se *StatusError
	if err := s.Get("/api/org", nil); !errors.As(err, &se) || se.Code != http.StatusUnauthorized {
		t.Errorf("a wrong password: %v", err)
	}
	pid := s.proc.Cmd.Process.Pid
	s.Stop()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("grafana (pid %d) still there after Stop: %v", pid, err)
	}
	c := http.Client{Timeout: 2 * time.Second}
	if resp, err := c.Get(s.URL() + "/api/health"); err == nil {
		resp.Body.Close()
		t.Errorf("port %d still answers after Stop", s.Port)
	}
}

// TestServerServesTheFrontend starts Grafana with its web frontend (building it when it is not
// cached): the login page names the webpack bundle, and the bundle is served.
func TestServerServesTheFrontend(t *testing.T) {
	testutil.Integration(t, "Grafana's web frontend, built from its Go module")
	s := ForTest(t, Config{PluginsDir: t.TempDir(), Provisioning: t.TempDir(), Frontend: true})
	get := func(path string) string {
		resp, err := http.Get(s.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	page := get("/login")
	m := regexp.MustCompile(`public/build/app\.[0-9a-f]+\.js`).FindString(page)
	if m == "" {
		t.Fatalf("the login page names no app bundle:\n%.2000s", page)
	}
	if js := get("/" + m); len(js) < 1<<20 {
		t.Errorf("%s is %d bytes: not the app", m, len(js))
	}
}
