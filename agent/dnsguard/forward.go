package dnsguard

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// ednsSize is the UDP payload size berm's own OPT record offers the upstream (the DNS flag
// day's 1232: no fragments).
const ednsSize = 1232

// forwarded is the query berm sends upstream in place of the tool's: rebuilt from what was
// judged, so that nothing else the tool wrote leaves. A fresh random ID; opcode QUERY and RD,
// no other header bit of the tool's (AD, CD, Z); the one question, its name lowercased (the
// case of a name's letters is a bit each the tool chooses); and an OPT record of berm's own,
// version 0, no flags and no options. The tool's EDNS options (client subnet, cookies,
// padding, local options), its authority and additional records never reach the upstream.
// The payload size offered is one of two values: ednsSize when the tool takes that much (its
// own OPT says so, or the transport is TCP), 512 otherwise, so the reply still fits the tool.
type forwarded struct {
	msg   []byte
	id    uint16
	qWire []byte // the question as written in msg (name, type, class), at offset 12
}

func forwardQuery(q *layers.DNS, transport string) (*forwarded, error) {
	var idb [2]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, fmt.Errorf("query id: %w", err)
	}
	size := uint16(512)
	if l := udpLimit(q, transport); l == 0 || l >= ednsSize {
		size = ednsSize
	}
	qn := q.Questions[0]
	m := layers.DNS{
		ID: binary.BigEndian.Uint16(idb[:]), OpCode: layers.DNSOpCodeQuery, RD: true,
		Questions:   []layers.DNSQuestion{{Name: bytes.ToLower(qn.Name), Type: qn.Type, Class: qn.Class}},
		Additionals: []layers.DNSResourceRecord{{Type: layers.DNSTypeOPT, Class: layers.DNSClass(size)}},
	}
	buf := gopacket.NewSerializeBuffer()
	if err := m.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		return nil, fmt.Errorf("write the upstream query: %w", err)
	}
	b, err := readsBack(buf.Bytes(), &m)
	if err != nil {
		return nil, fmt.Errorf("write the upstream query: %w", err)
	}
	return &forwarded{msg: b, id: m.ID, qWire: b[12 : len(b)-11]}, nil // an OPT record with no options is 11 bytes
}

// toTool turns the upstream's answer to f into the answer to the tool's query q: the tool's
// ID, and its question as it wrote it (the case of its letters) where the upstream echoed
// berm's.
func (f *forwarded) toTool(resp, q []byte) []byte {
	binary.BigEndian.PutUint16(resp[0:2], binary.BigEndian.Uint16(q[0:2]))
	n := len(f.qWire)
	if len(resp) >= 12+n && len(q) >= 12+n && bytes.Equal(resp[12:12+n], f.qWire) {
		copy(resp[12:12+n], q[12:12+n])
	}
	return resp
}
