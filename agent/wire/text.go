package wire

import (
	"bytes"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
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
