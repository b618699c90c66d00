package policy

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"
)

// MaxExtendsDepth bounds a chain of policy files extending one another.
const MaxExtendsDepth = 8

// maxPolicyFile bounds a parent policy file's size.
const maxPolicyFile = 1 << 20

// Parent is a policy file a policy extends (directly or through another), with the digest of
// the text it was parsed from: a policy parsed again only when its own text changed must also
// be parsed again when a parent's did (sandboxer's policy cache).
type Parent struct {
	Path string
	Sum  [sha256.Size]byte
}

// parseExtending parses a policy over its parent: the built-in strict policy, or the policy
// file its extends names (a path relative to the file that names it, or absolute), parsed
// the same way first. chain is the files that led here, for cycles and the depth bound.
func parseExtending(name string, data []byte, chain []string) (*Policy, error) {
	root, err := (&decoder{file: name}).document(data)
	if err != nil {
		return nil, err
	}
	base := Strict().Spec
	var parents []Parent
	if n := extendsNode(root); n != nil && n.Kind == yaml.ScalarNode && n.Tag == "!!str" && n.Value != "strict" && n.Value != "" {
		fail := func(format string, a ...any) Errors {
			return Errors{{File: name, Line: n.Line, Col: n.Column, Field: "extends", Msg: fmt.Sprintf(format, a...)}}
		}
		path := n.Value
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(name), path)
		}
		path = filepath.Clean(path)
		here := append(slices.Clone(chain), canonical(name))
		if slices.Contains(here, canonical(path)) {
			return nil, fail("extends %s: a cycle of policies extending one another (%s -> %s)", n.Value, strings.Join(here, " -> "), canonical(path))
		}
		if len(here) >= MaxExtendsDepth {
			return nil, fail("extends %s: more than %d policy files extend one another", n.Value, MaxExtendsDepth)
		}
		pdata, err := readPolicyFile(path)
		if err != nil {
			return nil, fail("extends %s: %v", n.Value, err)
		}
		parent, err := parseExtending(path, pdata, here)
		if err != nil {
			var es Errors
			if errors.As(err, &es) {
				return nil, append(fail("extends %s: the parent policy is not valid", n.Value), es...)
			}
			return nil, fail("extends %s: %v", n.Value, err)
		}
		base = parent.Spec
		parents = append([]Parent{{Path: path, Sum: sha256.Sum256(pdata)}}, parent.Parents...)
	}
	p, err := parse(name, data, &base)
	if err != nil {
		return nil, err
	}
	p.Parents = parents
	return p, nil
}

// extendsNode is the document's extends value, nil when there is none.
func extendsNode(root *yaml.Node) *yaml.Node {
	root = resolve(root)
	if root.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "extends" {
			return resolve(root.Content[i+1])
		}
	}
	return nil
}

// canonical is a path as it names its file: absolute, its symlinks resolved when it can be.
func canonical(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	return p
}

// readPolicyFile reads a parent policy: a regular file (a FIFO is refused, not waited on) of
// bounded size.
func readPolicyFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPolicyFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxPolicyFile)
	}
	return data, nil
}
