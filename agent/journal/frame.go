// Package journal is berm's local, append-only audit store: call starts, event batches and call
// records, framed with a length and a CRC so that a torn tail (a writer killed mid-write, a
// power loss) is detected, skipped by readers and cut off by the next writer. Records before a
// torn tail are never touched.
package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// RecordType says what a record's payload holds.
type RecordType uint8

const (
	TypeCallStart RecordType = 1 // event.CallStart, JSON
	TypeEvents    RecordType = 2 // []event.Event of one call, JSON
	TypeCallEnd   RecordType = 3 // event.CallRecord, JSON
)

func (t RecordType) String() string {
	switch t {
	case TypeCallStart:
		return "call_start"
	case TypeEvents:
		return "events"
	case TypeCallEnd:
		return "call_end"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// A frame is: u32 length of (type + payload), u32 CRC-32C of (type + payload), type, payload.
const (
	headerSize = 8
	// MaxRecord bounds one record; a length above it can only be garbage.
	MaxRecord = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendFrame(dst []byte, t RecordType, payload []byte) []byte {
	var hdr [headerSize + 1]byte
	binary.LittleEndian.PutUint32(hdr[0:4], uint32(len(payload)+1))
	crc := crc32.Update(crc32.Checksum([]byte{byte(t)}, castagnoli), castagnoli, payload)
	binary.LittleEndian.PutUint32(hdr[4:8], crc)
	hdr[8] = byte(t)
	dst = append(dst, hdr[:]...)
	return append(dst, payload...)
}

var (
	errShort   = errors.New("incomplete record")
	errCorrupt = errors.New("corrupt record")
)

// parseFrame reads the frame at the start of b. It returns errShort when b ends inside the
// frame and errCorrupt when the frame cannot be valid.
func parseFrame(b []byte) (t RecordType, payload []byte, size int, err error) {
	if len(b) < headerSize {
		return 0, nil, 0, errShort
	}
	n := binary.LittleEndian.Uint32(b[0:4])
	if n == 0 || n > MaxRecord {
		return 0, nil, 0, errCorrupt
	}
	if uint64(len(b)) < uint64(headerSize)+uint64(n) {
		return 0, nil, 0, errShort
	}
	body := b[headerSize : headerSize+int(n)]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[4:8]) {
		return 0, nil, 0, errCorrupt
	}
	t = RecordType(body[0])
	if t < TypeCallStart || t > TypeCallEnd {
		return 0, nil, 0, errCorrupt
	}
	return t, body[1:], headerSize + int(n), nil
}
