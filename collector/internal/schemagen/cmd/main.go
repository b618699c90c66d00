// Command schemagen writes the files that follow from agent/event (see package schemagen).
// `go generate ./collector` runs it from the collector's directory.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/bermsec/berm/collector/internal/schemagen"
)

func main() {
	root := flag.String("root", "..", "the module's root directory")
	flag.Parse()
	files, err := schemagen.Generate(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(*root, p)
		if old, err := os.ReadFile(full); err == nil && string(old) == string(files[p]) {
			continue
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "schemagen:", err)
			os.Exit(1)
		}
		fmt.Println("schemagen: wrote", p)
	}
}
