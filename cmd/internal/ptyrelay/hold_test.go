package ptyrelay

import (
	"bytes"
	"sync"
	"testing"
)

// log records which writer wrote what, in order.
type log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

type tagged struct {
	l   *log
	tag string
}

func (w tagged) Write(p []byte) (int, error) {
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	w.l.buf.WriteString(w.tag + ":" + string(p) + " ")
	return len(p), nil
}

// While a question is open, what the tool writes to any of the held writers waits, and comes
// out after the answer in the order it was written, across writers; before and after, it
// passes at once.
func TestHeldOutputComesAfterTheAnswerInOrder(t *testing.T) {
	r := &Relay{}
	r.hcond = sync.NewCond(&r.hmu)
	var l log
	out, errw := r.Hold(tagged{&l, "out"}), r.Hold(tagged{&l, "err"})
	out.Write([]byte("before"))
	r.hmu.Lock()
	r.holding = true // what Prompt does before it draws the question
	r.hmu.Unlock()
	out.Write([]byte("one"))
	errw.Write([]byte("two"))
	out.Write([]byte("three"))
	l.mu.Lock()
	if got := l.buf.String(); got != "out:before " {
		t.Fatalf("written while the question is open: %q", got)
	}
	l.buf.WriteString("QUESTION ")
	l.mu.Unlock()
	r.release()
	out.Write([]byte("after"))
	if got, want := l.buf.String(), "out:before QUESTION out:one err:two out:three out:after "; got != want {
		t.Fatalf("output %q, want %q", got, want)
	}
}
