package sandboxinit

import (
	"golang.org/x/sys/unix"
)

// The tool owns the workspace's owner's files through the idmapped mount, and what it makes
// belongs to that owner on the host: root, for a root-owned workspace. A setuid or setgid bit
// it set there would hand its program to any host user who can reach the workspace, with the
// owner's ids (the workspace's mount is nosuid in the call only). So no call may set one: a
// filter of the tool's own, beside the policy's, refuses every mode with S_ISUID or S_ISGID
// given to chmod, and to the calls that create files, directories and nodes. openat2 takes its
// mode in memory a filter cannot read: it fails with ENOSYS, and callers fall back to openat.

const setIDBits = unix.S_ISUID | unix.S_ISGID

// setIDRule is a syscall whose argument mode carries file mode bits; with flags >= 0, only
// when that argument asks to create (O_CREAT or O_TMPFILE).
type setIDRule struct {
	nr          uint32
	mode, flags int
}

var setIDRules = []setIDRule{
	{unix.SYS_CHMOD, 1, -1}, {unix.SYS_FCHMOD, 1, -1}, {unix.SYS_FCHMODAT, 2, -1}, {unix.SYS_FCHMODAT2, 2, -1},
	{unix.SYS_CREAT, 1, -1}, {unix.SYS_OPEN, 2, 1}, {unix.SYS_OPENAT, 3, 2},
	{unix.SYS_MKDIR, 1, -1}, {unix.SYS_MKDIRAT, 2, -1}, {unix.SYS_MKNOD, 1, -1}, {unix.SYS_MKNODAT, 2, -1},
}

const (
	seccompDataNr   = 0
	seccompDataArch = 4
	oTmpfileBit     = 0x400000 // __O_TMPFILE
)

func argLow(i int) uint32 { return uint32(16 + 8*i) } // little-endian: the low half first

// setIDFilter is the filter's program (x86-64; other architectures are the policy filter's).
func setIDFilter() []unix.SockFilter {
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	const allow, deny = -1, -2 // symbolic targets, resolved below
	type ins struct {
		f      unix.SockFilter
		jt, jf int // absolute targets (index, allow or deny); jf/jt == 0 means next
	}
	var p []ins
	add := func(code uint16, k uint32, jt, jf int) { p = append(p, ins{unix.SockFilter{Code: code, K: k}, jt, jf}) }
	add(ld, seccompDataArch, 0, 0)
	add(jeq, unix.AUDIT_ARCH_X86_64, 0, allow)
	add(ld, seccompDataNr, 0, 0)
	add(jeq, unix.SYS_OPENAT2, 0, 0)
	openat2 := len(p) - 1
	for _, r := range setIDRules {
		start := len(p)
		add(jeq, r.nr, 0, 0) // jf patched to the next rule
		if r.flags >= 0 {
			add(ld, argLow(r.flags), 0, 0)
			add(jset, unix.O_CREAT|oTmpfileBit, 0, allow)
		}
		add(ld, argLow(r.mode), 0, 0)
		add(jset, setIDBits, deny, allow)
		p[start].jf = len(p)
	}
	// Not one of them: allow. Then the two ends.
	end := len(p)
	add(ret, unix.SECCOMP_RET_ALLOW, 0, 0)
	add(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM), 0, 0)
	add(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS), 0, 0)
	allowAt, denyAt, enosysAt := end, end+1, end+2
	p[openat2].jt = enosysAt
	out := make([]unix.SockFilter, len(p))
	for i, in := range p {
		f := in.f
		rel := func(t int) uint8 {
			switch t {
			case 0:
				return 0
			case allow:
				t = allowAt
			case deny:
				t = denyAt
			}
			return uint8(t - i - 1)
		}
		if f.Code&unix.BPF_JMP != 0 {
			f.Jt, f.Jf = rel(in.jt), rel(in.jf)
		}
		out[i] = f
	}
	return out
}
