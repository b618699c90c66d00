package approval

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/agent/policy"
)

// redact takes every live secret out of r's fields (the object first: the tool chose it)
// and returns the names of the credentials found in its object, each once. Every field
// passes: a secret in the tool's name or the rule's is redacted too, but only the object is
// the tool's to choose, and only a secret there denies the request.
func (b *Broker) redact(r *Request) []string {
	if b.secrets == nil {
		return nil
	}
	var found []string
	scrub := func(p *string, object bool) {
		out, hits := b.secrets.Scrub(*p)
		if hits == nil {
			return
		}
		*p = out
		if !object {
			return
		}
		for _, h := range hits {
			name := h.Name + " (" + h.Encoding + ")"
			if !slices.Contains(found, name) {
				found = append(found, name)
			}
		}
	}
	scrub(&r.Object, true)
	for _, p := range []*string{&r.Tool, &r.Tenant, &r.CallID, &r.Rule} {
		scrub(p, false)
	}
	return found
}

// objectInode is the device and inode of the file a request is about, looked up through the
// tool's root (the thread's /proc/TID/root, RESOLVE_IN_ROOT: a symbolic link cannot lead it
// out), without following a last symbolic link and without opening the file (O_PATH: a FIFO
// or a device does not block). Empty when there is no such file (a write creating one) or
// the object is not a single file.
func objectInode(tid uint32, action, object string) string {
	p := object
	switch action {
	case policy.ApproveUnlink, policy.ApproveWrite:
		if a, _, ok := strings.Cut(object, " => "); ok { // a link: its source
			if strings.Count(object, " => ") != 1 {
				return ""
			}
			p = a
		}
	case policy.ApproveRename:
		a, _, ok := strings.Cut(object, " -> ")
		if !ok || strings.Count(object, " -> ") != 1 {
			return ""
		}
		p = a
	default:
		return ""
	}
	if !strings.HasPrefix(p, "/") {
		return ""
	}
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", tid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d %d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
}
