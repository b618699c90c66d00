package sandboxinit

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"golang.org/x/sys/unix"
)

// Program is a seccomp filter as it travels to the init and on to the tool's stage: one
// base64 string of 8-byte instructions (code, jt, jf, k, little-endian), not a JSON object per
// instruction. Both read it once per call in a fresh process, where decoding a few hundred
// objects by reflection cost a tenth of a millisecond or more on the launch's critical path.
type Program []unix.SockFilter

const insnSize = 8

// MarshalJSON encodes the instructions as one base64 string.
func (p Program) MarshalJSON() ([]byte, error) {
	raw := make([]byte, 0, len(p)*insnSize)
	for _, in := range p {
		raw = binary.LittleEndian.AppendUint16(raw, in.Code)
		raw = append(raw, in.Jt, in.Jf)
		raw = binary.LittleEndian.AppendUint32(raw, in.K)
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(raw))
}

// UnmarshalJSON decodes what MarshalJSON wrote; anything else is refused, never half-read:
// a filter cut short would be installed as a different filter.
func (p *Program) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("seccomp program: %w", err)
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("seccomp program: %w", err)
	}
	if len(raw)%insnSize != 0 {
		return fmt.Errorf("seccomp program: %d bytes is not a whole number of %d-byte instructions", len(raw), insnSize)
	}
	out := make(Program, len(raw)/insnSize)
	for i := range out {
		b := raw[i*insnSize:]
		out[i] = unix.SockFilter{Code: binary.LittleEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.LittleEndian.Uint32(b[4:])}
	}
	*p = out
	return nil
}
