package policy

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// Diff is what differs between two policies' specs, each setting as a line "path: value" (a
// list's entries one line each, "path[]: entry", so a reordered list is no difference):
// Removed are a's lines b lacks, Added b's lines a lacks.
func Diff(a, b *Policy) (removed, added []string) {
	la, lb := specLines(a.Spec), specLines(b.Spec)
	for _, l := range la {
		if _, ok := slices.BinarySearch(lb, l); !ok {
			removed = append(removed, l)
		}
	}
	for _, l := range lb {
		if _, ok := slices.BinarySearch(la, l); !ok {
			added = append(added, l)
		}
	}
	return removed, added
}

func specLines(s Spec) []string {
	raw, err := json.Marshal(s)
	if err != nil {
		return []string{"(unreadable spec: " + err.Error() + ")"}
	}
	var v any
	_ = json.Unmarshal(raw, &v)
	var out []string
	flatten("spec", v, &out)
	sort.Strings(out)
	return slices.Compact(out)
}

func flatten(path string, v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			flatten(path+"."+lowerFirst(k), e, out)
		}
	case []any:
		for _, e := range x {
			switch e.(type) {
			case map[string]any, []any:
				b, _ := json.Marshal(e)
				*out = append(*out, path+"[]: "+string(b))
			default:
				flatten(path+"[]", e, out)
			}
		}
	case nil:
	default:
		b, _ := json.Marshal(x)
		*out = append(*out, path+": "+string(b))
	}
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// DiffMain is `berm policy diff A B`: A and B are policy files, or "strict" for the built-in
// one. Exit 0 when they are the same, 1 when they differ, 2 on a usage or load error.
func DiffMain(args []string, stdout, stderr io.Writer) int {
	const use = "usage: berm policy diff A B   (a file, or strict for the built-in policy)"
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprintln(stdout, use)
		return 0
	}
	if len(args) != 2 {
		fmt.Fprintln(stderr, use)
		return 2
	}
	var ps [2]*Policy
	for i, a := range args {
		if a == "strict" {
			ps[i] = Strict()
			continue
		}
		p, err := Load(a)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		ps[i] = p
	}
	removed, added := Diff(ps[0], ps[1])
	for _, l := range removed {
		fmt.Fprintf(stdout, "- %s\n", l)
	}
	for _, l := range added {
		fmt.Fprintf(stdout, "+ %s\n", l)
	}
	if len(removed)+len(added) == 0 {
		fmt.Fprintf(stdout, "%s and %s are the same policy\n", args[0], args[1])
		return 0
	}
	return 1
}
