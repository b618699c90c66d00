package mcpserve

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/bermsec/berm/agent/policy"
)

// serverPaths are what an MCP server's own command needs beyond its policy: the command's
// file (symlinks resolved), or when it lies in a node_modules tree, that tree (a Node
// server's dependencies, its .bin links among them).
func serverPaths(cmd string) ([]string, error) {
	p, err := exec.LookPath(cmd)
	if err != nil {
		return nil, fmt.Errorf("server command: %w", err)
	}
	if p, err = filepath.Abs(p); err != nil {
		return nil, err
	}
	// The file itself, not a symlink to it: the sandbox's root holds what the policy names,
	// and the link stays reachable through the tree it lies in.
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, fmt.Errorf("server command: %w", err)
	}
	for d := filepath.Dir(r); d != "/" && d != "."; d = filepath.Dir(d) {
		if filepath.Base(d) == "node_modules" {
			return []string{d}, nil
		}
	}
	return []string{r}, nil
}

// serverPolicy writes the server's policy: the given policy file's (or the built-in strict
// one), with read and exec of the server's own paths added. The file is root's, under dir.
func serverPolicy(policyFile string, extra []string, dir string) (string, error) {
	data := policy.StrictYAML()
	if policyFile != "" {
		b, err := os.ReadFile(policyFile)
		if err != nil {
			return "", fmt.Errorf("--policy: %w", err)
		}
		data = b
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return "", fmt.Errorf("policy: %v", err)
	}
	root := doc.Content[0]
	fsNode := mapPath(root, "spec", "filesystem")
	for _, key := range []string{"read", "exec"} {
		// A list the policy writes out is appended to; one it leaves to strict, or changes
		// with {add, remove}, gets the paths added to strict's (a list of them alone would
		// replace strict's, and the server could read nothing else).
		var seq *yaml.Node
		switch written := lookup(fsNode, key); {
		case written == nil:
			seq = mapPath(fsNode, key, "add")
		case written.Kind == yaml.MappingNode:
			seq = mapPath(written, "add")
		default:
			seq = written
		}
		if seq.Kind != yaml.SequenceNode {
			return "", fmt.Errorf("policy: spec.filesystem.%s is neither a list nor {add: [...], remove: [...]}", key)
		}
		for _, p := range extra {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: p})
		}
	}
	if name := mapPath(root, "metadata", "name"); name.Kind == yaml.ScalarNode && name.Value != "" {
		name.Value = strings.TrimSuffix(name.Value, "-mcp-server") + "-mcp-server"
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return "", err
	}
	if _, err := policy.Parse("mcp server policy", out); err != nil {
		return "", fmt.Errorf("the server's policy: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "server-*.yaml")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write(out); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// mapPath walks (creating) mapping keys.
// lookup is n's value for key, nil when n has none.
func lookup(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func mapPath(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			next = &yaml.Node{Kind: yaml.MappingNode}
			if k == "add" || (k == "read" || k == "exec") && len(keys) == 1 {
				next = &yaml.Node{Kind: yaml.SequenceNode}
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, next)
		}
		n = next
	}
	return n
}
