package dnsguard

import (
	"bytes"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// decode is layers.DNS.DecodeFromBytes that returns an error where gopacket panics: v1.1.19
// slices a resource record's fixed fields before checking they are there, so a 13-byte
// query from the tool (or an upstream's answer) would end bermd and every call in it.
func decode(msg *layers.DNS, b []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			*msg = layers.DNS{}
			err = fmt.Errorf("malformed dns message: %v", r)
		}
	}()
	return msg.DecodeFromBytes(b, gopacket.NilDecodeFeedback)
}

// readsBack returns b, the message want as berm wrote it, if it decodes to want's questions
// and records. gopacket writes names from their dotted form and addresses from their value:
// a label holding a '.' or an empty one (legal on the wire, an upstream's or a tool's choice)
// comes out as other labels, shifting what follows; an AAAA record of four bytes comes out
// as another address. Nothing goes to the tool but what berm judged.
func readsBack(b []byte, want *layers.DNS) ([]byte, error) {
	var got layers.DNS
	if err := decode(&got, b); err != nil {
		return nil, fmt.Errorf("the message written does not read back: %w", err)
	}
	if len(got.Questions) != len(want.Questions) {
		return nil, fmt.Errorf("the message written reads back with %d questions, not %d", len(got.Questions), len(want.Questions))
	}
	for i, q := range want.Questions {
		if g := got.Questions[i]; !bytes.Equal(g.Name, q.Name) || g.Type != q.Type || g.Class != q.Class {
			return nil, fmt.Errorf("the message written reads back with question %q, not %q", g.Name, q.Name)
		}
	}
	for _, s := range [][2][]layers.DNSResourceRecord{{want.Answers, got.Answers}, {want.Authorities, got.Authorities}, {want.Additionals, got.Additionals}} {
		if len(s[0]) != len(s[1]) {
			return nil, fmt.Errorf("the message written reads back with %d records in a section, not %d", len(s[1]), len(s[0]))
		}
		for i := range s[0] {
			w, g := &s[0][i], &s[1][i]
			wa, wok := rrAddr(w)
			ga, gok := rrAddr(g)
			if !bytes.Equal(w.Name, g.Name) || w.Type != g.Type || w.Class != g.Class || wok != gok || wa != ga {
				return nil, fmt.Errorf("the message written reads back with record %q %v %v, not %q %v %v", g.Name, g.Type, ga, w.Name, w.Type, wa)
			}
		}
	}
	return b, nil
}

// plainQuestion says whether query q's question is written as berm would write it back
// (labels without '.', none empty, no compression). Otherwise the dotted name the domain
// rules judge is not the name the upstream is asked: one label "x.allowed.test" reads as
// three, and the upstream resolves another name than the one allowed.
func plainQuestion(q []byte, msg *layers.DNS) bool {
	r := layers.DNS{ID: msg.ID, Questions: msg.Questions[:1]}
	buf := gopacket.NewSerializeBuffer()
	if err := r.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		return false
	}
	b := buf.Bytes()
	return len(b) >= 12 && len(q) >= len(b) && bytes.Equal(q[12:len(b)], b[12:])
}
