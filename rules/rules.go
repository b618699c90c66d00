// Package rules is berm's detection language: YAML rule files whose conditions are CEL
// expressions over the event schema, compiled and type-checked at load, indexed by event kind,
// and evaluated on every call's live stream. Alerts are events of the call. See README.md.
package rules

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
)

//go:embed ruleset/*.yaml
var shippedFS embed.FS

// ShippedDir is how the embedded ruleset's files are named in messages.
const ShippedDir = "rules/ruleset"

// LoadFiles loads rule files (directories are searched for *.yaml and *.yml). Lists and macros
// are shared by every file of the load. Any problem fails the whole load with a *LoadError.
func LoadFiles(paths ...string) (*Set, error) {
	fp := fingerprint(paths) // before reading: a change during the load is seen by Watch
	l := &loader{}
	names, err := l.readFiles(paths)
	if err != nil {
		return nil, err
	}
	s, err := l.compile(names)
	if s != nil {
		s.fingerprint = fp
	}
	return s, err
}

// Shipped loads the embedded ruleset.
func Shipped() (*Set, error) {
	l := &loader{}
	names, err := l.readShipped()
	if err != nil {
		return nil, err
	}
	return l.compile(names)
}

// LoadWithShipped loads the embedded ruleset and the given files as one set: the files can use
// the shipped lists and macros and add rules (rule ids must stay unique).
func LoadWithShipped(paths ...string) (*Set, error) {
	fp := fingerprint(paths)
	l := &loader{}
	names, err := l.readShipped()
	if err != nil {
		return nil, err
	}
	more, err := l.readFiles(paths)
	if err != nil {
		return nil, err
	}
	s, err := l.compile(append(names, more...))
	if s != nil {
		s.fingerprint = fp
	}
	return s, err
}

func (l *loader) readFiles(paths []string) ([]string, error) {
	files, err := filesOf(paths)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		l.parse(newSource(f, data), data)
	}
	return files, nil
}

func (l *loader) readShipped() ([]string, error) {
	entries, err := fs.ReadDir(shippedFS, "ruleset")
	if err != nil {
		return nil, fmt.Errorf("rules: shipped ruleset: %w", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		data, err := shippedFS.ReadFile(path.Join("ruleset", n))
		if err != nil {
			return nil, fmt.Errorf("rules: shipped ruleset: %w", err)
		}
		name := path.Join(ShippedDir, n)
		l.parse(newSource(name, data), data)
		out = append(out, name)
	}
	return out, nil
}
