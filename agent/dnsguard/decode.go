package dnsguard

import (
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

// readsBack returns b, a message berm wrote, if it decodes as DNS. gopacket writes names
// from their dotted form: a label holding a '.' (legal on the wire, an upstream's or a tool's
// choice) comes out as other labels or as a message that does not parse. Nothing goes to
// the tool that berm could not read itself.
func readsBack(b []byte) ([]byte, error) {
	var m layers.DNS
	if err := decode(&m, b); err != nil {
		return nil, fmt.Errorf("the message written does not read back: %w", err)
	}
	return b, nil
}
