package mcpserve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// DefaultMaxMessage bounds one JSON-RPC message (one line on stdio, one HTTP body): a client
// cannot make berm hold more than this for it.
const DefaultMaxMessage = 4 << 20

// errTooLarge is a line longer than the bound: it was read to its end and dropped.
var errTooLarge = errors.New("message too large")

// lineReader reads newline-delimited messages of at most max bytes.
type lineReader struct {
	r   *bufio.Reader
	max int
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next non-empty line without its newline. A line past the bound is read
// through (never held) and reported as errTooLarge; the reader goes on after it.
func (l *lineReader) next() ([]byte, error) {
	for {
		var line []byte
		over := false
		for {
			frag, err := l.r.ReadSlice('\n')
			if !over {
				if len(line)+len(frag) > l.max+1 {
					over, line = true, nil
				} else {
					line = append(line, frag...)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				if over {
					return nil, errTooLarge
				}
				if len(bytes.TrimSpace(line)) > 0 && err == io.EOF {
					return bytes.TrimSpace(line), nil
				}
				return nil, err
			}
			break
		}
		if over {
			return nil, errTooLarge
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return line, nil
		}
	}
}

// lineWriter writes whole lines, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lineWriter) writeLine(b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := w.w.Write(append(append(make([]byte, 0, len(b)+1), b...), '\n'))
	return err
}

// rpcError is a JSON-RPC error response; id is the request's id as JSON text ("null" when
// it could not be read).
func rpcError(id json.RawMessage, code int, msg string) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, msg}})
	return b
}

// JSON-RPC error codes berm answers with.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeInternalError  = -32603
)

// envelope is what berm reads of a JSON-RPC message to route it.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

// parseEnvelope reads one message; an error is the JSON-RPC error to answer it with.
func parseEnvelope(line []byte) (*envelope, []byte) {
	var e envelope
	if !json.Valid(line) {
		return nil, rpcError(nil, codeParseError, "parse error: not JSON")
	}
	if err := json.Unmarshal(line, &e); err != nil {
		return nil, rpcError(nil, codeInvalidRequest, "invalid request: not a JSON-RPC 2.0 message object")
	}
	if e.JSONRPC != "2.0" || (e.Method == "" && len(e.ID) == 0) {
		return nil, rpcError(e.ID, codeInvalidRequest, "invalid request: not a JSON-RPC 2.0 message")
	}
	return &e, nil
}

// isRequest: a call that expects an answer.
func (e *envelope) isRequest() bool {
	return e.Method != "" && len(e.ID) > 0 && string(e.ID) != "null"
}

// isResponse: an answer to a call.
func (e *envelope) isResponse() bool { return e.Method == "" && len(e.ID) > 0 }

// capText caps s at n bytes, valid UTF-8, saying how much was left out.
func capText(b []byte, n int) (string, bool) {
	if len(b) <= n {
		return string(bytes.ToValidUTF8(b, []byte("\uFFFD"))), false
	}
	return string(bytes.ToValidUTF8(b[:n], []byte("\uFFFD"))) + fmt.Sprintf("\n[berm: %d more bytes not shown]", len(b)-n), true
}
