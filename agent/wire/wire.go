// Package wire turns the kernel's ring buffer records (bpf/lib/berm.h) into events. It holds
// no knowledge of any event kind: the package that owns a kind registers its decoder at init
// (the tracer exec, fork, exit, open, connect and syscalls; netguard its network denials; lsm
// its file denials), as Tetragon's observer does per op.
package wire

import (
	"fmt"
	"unsafe"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/bpf"
)

// maxOp bounds the op table: ops are small consecutive numbers (enum berm_op).
const maxOp = 64

type handler struct {
	size   uintptr // the struct's size: exact for fixed records, the minimum for variable ones
	max    uintptr // variable records: the largest size; 0 for fixed ones
	decode func(raw []byte, ev *event.Event) error
}

var handlers [maxOp]handler

// HdrSize is the size of struct berm_hdr, which starts every record.
const HdrSize = int(unsafe.Sizeof(bpf.WireBermHdr{}))

// Register makes records of op decode as a T. A record's header must state T's size exactly,
// and the record must hold it. Called from init functions; a second registration of an op
// is a programming error.
func Register[T any](op bpf.WireBermOp, decode func(e *T, ev *event.Event)) {
	var zero T
	register(op, handler{size: unsafe.Sizeof(zero), decode: func(raw []byte, ev *event.Event) error {
		decode((*T)(unsafe.Pointer(&raw[0])), ev)
		return nil
	}})
}

// RegisterVariable makes records of op decode as a T followed by a tail the kernel sized to
// what it used (paths, argv): a record is at least T's size and at most max bytes, and decode
// gets the tail (the record past T) as well.
func RegisterVariable[T any](op bpf.WireBermOp, max uintptr, decode func(e *T, tail []byte, ev *event.Event) error) {
	var zero T
	size := unsafe.Sizeof(zero)
	register(op, handler{size: size, max: max, decode: func(raw []byte, ev *event.Event) error {
		return decode((*T)(unsafe.Pointer(&raw[0])), raw[size:], ev)
	}})
}

func register(op bpf.WireBermOp, h handler) {
	if op == 0 || op >= maxOp {
		panic(fmt.Sprintf("wire: op %d out of range", op))
	}
	if handlers[op].decode != nil {
		panic(fmt.Sprintf("wire: op %d registered twice", op))
	}
	handlers[op] = h
}

// Ops lists the registered ops and their (minimum) record sizes, for the contract test.
func Ops() map[bpf.WireBermOp]uintptr {
	ops := map[bpf.WireBermOp]uintptr{}
	for op, h := range handlers {
		if h.decode != nil {
			ops[bpf.WireBermOp(op)] = h.size
		}
	}
	return ops
}

// Header views the header of a raw record without decoding the rest.
func Header(raw []byte) (*bpf.WireBermHdr, bool) {
	if len(raw) < HdrSize {
		return nil, false
	}
	return (*bpf.WireBermHdr)(unsafe.Pointer(&raw[0])), true
}

// Decode turns one raw record into an event: the header's fields, then the op's decoder. A
// record whose header disagrees with the contract is malformed: an error, never a guess.
// Time is left to the caller's clock.
func Decode(raw []byte, ev *event.Event) error {
	h, ok := Header(raw)
	if !ok {
		return fmt.Errorf("record of %d bytes is shorter than the header", len(raw))
	}
	var hd handler
	if h.Op < maxOp {
		hd = handlers[h.Op]
	}
	if hd.decode == nil {
		return fmt.Errorf("unknown op %d", h.Op)
	}
	size := uintptr(h.Size)
	if hd.max == 0 && size != hd.size || hd.max != 0 && (size < hd.size || size > hd.max) || uintptr(len(raw)) < size {
		return fmt.Errorf("op %d: header says %d bytes, record has %d, contract says %d", h.Op, h.Size, len(raw), hd.size)
	}
	ev.PID, ev.TID, ev.PPID, ev.UID = h.Pid, h.Tid, h.Ppid, h.Uid
	ev.Comm = CString(h.Comm[:])
	if err := hd.decode(raw[:size], ev); err != nil {
		return fmt.Errorf("op %d: %w", h.Op, err)
	}
	return nil
}

// As views a raw record as a T without decoding it, if the record holds one.
func As[T any](raw []byte) (*T, bool) {
	var zero T
	if len(raw) < int(unsafe.Sizeof(zero)) {
		return nil, false
	}
	return (*T)(unsafe.Pointer(&raw[0])), true
}
