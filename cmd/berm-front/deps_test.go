package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The front starts once per tool call: whatever it links, every call pays for at start
// (package init) and exec (binary size). The heavy parts belong to berm-full and bermd.
func TestFrontLinksNothingHeavy(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	heavy := []string{"cel.dev/", "github.com/ClickHouse/", "github.com/prometheus/", "github.com/cilium/ebpf",
		"google.golang.org/protobuf", "gopkg.in/yaml", "go.yaml.in/yaml", "github.com/bermsec/berm/agent\n", "net\n",
		"crypto/rand\n", "math/big\n"}
	deps := string(out)
	for _, h := range heavy {
		if strings.Contains(deps, h) {
			t.Errorf("cmd/berm-front links %s", strings.TrimSpace(h))
		}
	}
}
