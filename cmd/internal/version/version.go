// Package version says which berm this is: the same lines for `berm version`, `berm
// --version`, `bermd --version` and `berm-collector --version`.
package version

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/bermsec/berm/sandboxer/probe"
)

// Version and Commit are set at link time where a release build knows them:
//
//	go build -ldflags "-X github.com/bermsec/berm/cmd/internal/version.Version=v0.4.0"
//
// Left empty, they come from the build information Go embeds (the module's version, the VCS
// revision of a build from a checkout).
var Version, Commit string

// Info is what the binary knows of its own build.
type Info struct {
	Version  string `json:"version"`  // module version, or "devel"
	Commit   string `json:"commit"`   // VCS revision, "" when built outside a checkout
	Modified bool   `json:"modified"` // built from a checkout with uncommitted changes
	Go       string `json:"go"`
}

// Read gathers Info from the link-time variables and the embedded build information.
func Read() Info {
	i := Info{Version: Version, Commit: Commit, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Commit == "" {
					i.Commit = s.Value
				}
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
	}
	if i.Version == "" {
		i.Version = "devel"
	}
	return i
}

// Write prints prog's version lines; kernel, when given, adds what this kernel lets berm use
// (sandboxer/probe).
func Write(w io.Writer, prog string, kernel *probe.Report) {
	i := Read()
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	}
	if i.Modified {
		commit += " (modified)"
	}
	fmt.Fprintf(w, "%s %s\ncommit: %s\ngo: %s %s/%s\n", prog, i.Version, commit, i.Go, runtime.GOOS, runtime.GOARCH)
	if kernel == nil {
		return
	}
	fmt.Fprintf(w, "kernel: %s\n", kernel.Kernel)
	fmt.Fprintf(w, "layers: %s\n", strings.Join(kernel.Layers, ", "))
	if len(kernel.Missing) > 0 {
		fmt.Fprintf(w, "refused by this kernel: %s (berm doctor says why)\n", strings.Join(kernel.Missing, ", "))
	}
}
