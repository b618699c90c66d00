package secrets

import (
	"bytes"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"slices"
)

// A DNS name carries data out in its labels: a tool that has a secret can send it a chunk at a
// time, in any encoding, split over labels, in any case (DNS names are case-insensitive, and
// resolvers may change the case on the way). InName looks for any chunk of a live secret in a
// name, not only a whole form: the name and every form are compared as their letters and
// digits alone, lowercased, and any ChunkLen of them in a row that belong to a form is a find.

// ChunkLen is the shortest run of a form's letters and digits that counts as a chunk of the
// secret in a name: 8 (32 bits of a hex form, 40 of base32), short enough that a tunnel must
// cut a secret into pieces no resolver query is worth, long enough that a name matches by
// chance with odds of one in 10^12 per live form.
const ChunkLen = 8

// ShortChunkLen is the shortest chunk found of the forms whose characters carry 5 bits or
// more each (raw and reversed, base32, base64: 30 bits and more in 6 characters), when the
// chunk mixes letters and digits. Hex forms keep ChunkLen: 6 hex characters are 24 bits, and
// hex labels (CDN object hashes, commit ids) are common in ordinary names. A run of letters
// alone or digits alone keeps ChunkLen too: those are the runs words and numbers in ordinary
// names are made of, and a secret that is words (a password) would match them. See README.md.
const ShortChunkLen = 6

// shortChunkable says whether a 6-run of a form's letters and digits of encoding enc counts.
func shortChunkable(enc string, run []byte) bool {
	if enc == Hex || enc == HexReversed {
		return false
	}
	letter, digit := false, false
	for _, c := range run {
		if c >= '0' && c <= '9' {
			digit = true
		} else {
			letter = true
		}
	}
	return letter && digit
}

// Encodings InName knows on top of Forms'.
const (
	Reversed    = "reversed"     // the secret's bytes backwards
	HexReversed = "hex-reversed" // hex of the reversed secret, or the hex backwards
	Base32      = "base32"       // RFC 4648 base32, standard or extended-hex alphabet
)

// nameForms are a secret's forms as a name carries them: its letters and digits, lowercased,
// for each encoding a tunnel uses, at every alignment an encoder can cut the secret at (a
// chunk encoded on its own starts at any byte).
func nameForms(value []byte) []Form {
	var out []Form
	add := func(enc string, b []byte) {
		if n := normalize(b); len(n) >= minForm {
			out = append(out, Form{enc, n})
		}
	}
	rev := slices.Clone(value)
	slices.Reverse(rev)
	add(Raw, value)
	add(Reversed, rev)
	h := []byte(hex.EncodeToString(value))
	add(Hex, h)
	add(HexReversed, []byte(hex.EncodeToString(rev)))
	slices.Reverse(h)
	add(HexReversed, h)
	// An encoding of value[i:] without its last character (which depends on what follows):
	// every chunk an encoder makes of the secret from a byte at offset i (mod the group) is
	// a run of these, whatever it encoded the chunk with.
	for _, e := range []struct {
		name  string
		group int
		enc   interface{ EncodeToString([]byte) string }
	}{
		{Base32, 5, base32.StdEncoding.WithPadding(base32.NoPadding)},
		{Base32, 5, base32.HexEncoding.WithPadding(base32.NoPadding)},
		{Base64, 3, base64.RawStdEncoding},
		{Base64URL, 3, base64.RawURLEncoding},
	} {
		for i := 0; i < e.group && i < len(value); i++ {
			s := e.enc.EncodeToString(value[i:])
			add(e.name, []byte(s[:len(s)-1]))
		}
	}
	return out
}

// normalize is b's letters and digits, lowercased.
func normalize(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			out = append(out, c)
		case c >= 'A' && c <= 'Z':
			out = append(out, c+'a'-'A')
		}
	}
	return out
}

// chunkOwner is who a chunk of ChunkLen belongs to (the first form registered with it).
type chunkOwner struct {
	owner    *Owner
	encoding string
	whole    int // the form's length: a form shorter than ChunkLen is only found whole
}

// chunkIndex maps every ChunkLen run of every live secret's name forms to its owner; forms
// shorter than ChunkLen are kept whole.
type chunkIndex struct {
	runs  map[uint64]chunkOwner
	runs6 map[uint64]chunkOwner // ShortChunkLen runs that count (shortChunkable)
	short []Literal
}

func packRun(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

func packRun6(b []byte) uint64 {
	return uint64(binary.LittleEndian.Uint32(b)) | uint64(b[4])<<32 | uint64(b[5])<<40
}

func newChunkIndex(entries map[*entry]bool) *chunkIndex {
	ix := &chunkIndex{runs: map[uint64]chunkOwner{}, runs6: map[uint64]chunkOwner{}}
	for e := range entries {
		for _, f := range e.nameForms {
			for i := 0; i+ShortChunkLen <= len(f.Bytes); i++ {
				if !shortChunkable(f.Encoding, f.Bytes[i:i+ShortChunkLen]) {
					continue
				}
				if k := packRun6(f.Bytes[i:]); ix.runs6[k].owner == nil {
					ix.runs6[k] = chunkOwner{owner: &e.Owner, encoding: f.Encoding, whole: len(f.Bytes)}
				}
			}
			if len(f.Bytes) < ChunkLen {
				ix.short = append(ix.short, Literal{Name: e.Name, Form: f, Owner: &e.Owner})
				continue
			}
			for i := 0; i+ChunkLen <= len(f.Bytes); i++ {
				k := packRun(f.Bytes[i:])
				if _, ok := ix.runs[k]; !ok {
					ix.runs[k] = chunkOwner{owner: &e.Owner, encoding: f.Encoding, whole: len(f.Bytes)}
				}
			}
		}
	}
	return ix
}

// InName returns name with every chunk of a live secret in it replaced by the secret's
// marker, and what it found (one Hit per secret and encoding). A chunk is ChunkLen letters
// and digits in a row, compared lowercased with the dots, hyphens and other separators of
// the name left out, that belong to one of the secret's forms (nameForms: raw, reversed, hex
// and hex reversed, base32 in both alphabets and base64 at every alignment); a form shorter
// than that is found whole.
func (r *Registry) InName(name string) (string, []Hit) {
	if !r.Live() {
		return name, nil
	}
	ix := r.chunks()
	// norm is the name's letters and digits, lowercased; pos maps each back into name.
	norm := make([]byte, 0, len(name))
	pos := make([]int, 0, len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		default:
			continue
		}
		norm = append(norm, c)
		pos = append(pos, i)
	}
	type span struct {
		from, to int // in norm, to exclusive
		name     string
	}
	var spans []span
	var hits []Hit
	found := func(o *Owner, enc string, from, to int) {
		spans = append(spans, span{from, to, o.Name})
		for _, h := range hits {
			if h.Owner == *o && h.Encoding == enc {
				return
			}
		}
		hits = append(hits, Hit{Owner: *o, Encoding: enc})
	}
	for i := 0; i+ChunkLen <= len(norm); i++ {
		if c, ok := ix.runs[packRun(norm[i:])]; ok {
			found(c.owner, c.encoding, i, i+ChunkLen)
		}
	}
	for i := 0; i+ShortChunkLen <= len(norm); i++ {
		if c, ok := ix.runs6[packRun6(norm[i:])]; ok {
			found(c.owner, c.encoding, i, i+ShortChunkLen)
		}
	}
	for _, l := range ix.short {
		for from := 0; from < len(norm); {
			at := bytes.Index(norm[from:], l.Bytes)
			if at < 0 {
				break
			}
			found(l.Owner, l.Encoding, from+at, from+at+len(l.Bytes))
			from += at + 1
		}
	}
	if hits == nil {
		return name, nil
	}
	// Overlapping and adjacent finds are one redaction, from the first letter of the first to
	// the last of the last (what separates them in the name goes too).
	slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
	merged := spans[:1]
	for _, sp := range spans[1:] {
		if m := &merged[len(merged)-1]; sp.from <= m.to {
			m.to = max(m.to, sp.to)
		} else {
			merged = append(merged, sp)
		}
	}
	var out []byte
	last := 0
	for _, sp := range merged {
		from, to := pos[sp.from], pos[sp.to-1]+1
		out = append(out, name[last:from]...)
		out = append(out, Marker(sp.name)...)
		last = to
	}
	out = append(out, name[last:]...)
	return string(out), hits
}

// chunks is the chunk index of every live secret, made again when the set changed.
func (r *Registry) chunks() *chunkIndex {
	g := r.gen.Load()
	r.mu.RLock()
	ix, ig := r.chunkIx, r.chunkGen
	r.mu.RUnlock()
	if ix != nil && ig == g {
		return ix
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.chunkIx != nil && r.chunkGen == r.gen.Load() {
		return r.chunkIx
	}
	r.chunkIx, r.chunkGen = newChunkIndex(r.live), r.gen.Load()
	return r.chunkIx
}
