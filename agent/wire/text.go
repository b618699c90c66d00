package wire

import (
	"bytes"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bermsec/berm/bpf"
)

// Bytes views a C char array (generated as []int8) as bytes.
func Bytes(s []int8) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// CString is the NUL-terminated string at the start of a C char array.
func CString(s []int8) string { return CBytes(Bytes(s)) }

// CBytes is the NUL-terminated string at the start of b (all of b without a NUL).
func CBytes(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// ErrnoName names a syscall's negative errno result ("EACCES"); "" for a success.
func ErrnoName(ret int64) string {
	if ret >= 0 || ret < -4095 {
		return ""
	}
	if n := unix.ErrnoName(syscall.Errno(-ret)); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", -ret)
}

// Str is a string of a variable record's tail (struct berm_str).
type Str struct {
	S         string
	Truncated bool   // the kernel cut it
	Full      uint32 // its whole length; 0 when not known
}

// LenUnknown is BERM_LEN_UNKNOWN: a kernel path cut at a depth whose length was not measured.
const LenUnknown = 0xffffffff

// Tail reads the strings of a variable record's tail, in field order.
type Tail struct {
	b   []byte
	off int
	err error
}

// NewTail reads b, the bytes past a variable record's struct.
func NewTail(b []byte) *Tail { return &Tail{b: b} }

// Next is the next string, described by s.
func (t *Tail) Next(s bpf.WireBermStr) Str {
	if t.err != nil {
		return Str{}
	}
	if int(s.Len) > len(t.b)-t.off {
		t.err = fmt.Errorf("string of %d bytes at %d past the record's %d tail bytes", s.Len, t.off, len(t.b))
		return Str{}
	}
	out := Str{S: string(t.b[t.off : t.off+int(s.Len)]), Full: s.Full, Truncated: s.Full != s.Len}
	if s.Full == LenUnknown {
		out.Full = 0
	}
	t.off += int(s.Len)
	return out
}

// Err is the first string that did not fit the record.
func (t *Tail) Err() error { return t.err }

// Source names an enum berm_source.
func Source(src uint32) string {
	switch bpf.WireBermSource(src) {
	case bpf.WireBermSourceBERM_SRC_KERNEL:
		return "kernel"
	case bpf.WireBermSourceBERM_SRC_USER:
		return "user"
	}
	return ""
}
