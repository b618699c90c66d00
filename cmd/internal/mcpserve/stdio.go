package mcpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// metaRequestID is the _meta key berm puts the JSON-RPC id of a tools/call under, for the
// tool's handler (the SDK does not hand it the id). Whatever a client put there is replaced.
const metaRequestID = "dev.berm/request_id"

// stdioTransport is MCP over stdio as the SDK's, with berm's own reading: a message past the
// bound or one that is not JSON-RPC is answered with a JSON-RPC error (and dropped) instead
// of ending the session, and each tools/call carries its id to the handler.
type stdioTransport struct {
	in      io.Reader
	out     io.Writer
	max     int
	session string
}

func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c := &stdioConn{w: &lineWriter{w: t.out}, session: t.session, msgs: make(chan readResult), closed: make(chan struct{})}
	c.answered = sync.NewCond(&c.mu)
	go c.readLoop(newLineReader(t.in, t.max))
	return c, nil
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

type stdioConn struct {
	w       *lineWriter
	session string
	msgs    chan readResult
	once    sync.Once
	closed  chan struct{}

	// open counts requests passed to the SDK and not yet answered: at the end of stdin, the
	// session ends once they are (a client that writes its requests and closes still gets
	// its answers).
	mu       sync.Mutex
	open     int
	answered *sync.Cond
}

func (c *stdioConn) readLoop(lr *lineReader) {
	for {
		line, err := lr.next()
		if errors.Is(err, errTooLarge) {
			_ = c.w.writeLine(rpcError(nil, codeInvalidRequest, fmt.Sprintf("message of more than %d bytes", lr.max)))
			continue
		}
		if err != nil {
			c.mu.Lock()
			for c.open > 0 && !c.isClosed() {
				c.answered.Wait()
			}
			c.mu.Unlock()
			c.deliver(readResult{err: err})
			return
		}
		env, rerr := parseEnvelope(line)
		if rerr != nil {
			_ = c.w.writeLine(rerr)
			continue
		}
		if env.Method == "tools/call" && env.isRequest() {
			line = withRequestID(env, line)
		}
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			_ = c.w.writeLine(rpcError(env.ID, codeInvalidRequest, fmt.Sprintf("invalid request: %v", err)))
			continue
		}
		if env.isRequest() {
			c.mu.Lock()
			c.open++
			c.mu.Unlock()
		}
		if !c.deliver(readResult{msg: msg}) {
			return
		}
	}
}

func (c *stdioConn) deliver(r readResult) bool {
	select {
	case c.msgs <- r:
		return true
	case <-c.closed:
		return false
	}
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case r := <-c.msgs:
		return r.msg, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	err = c.w.writeLine(b)
	if _, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		c.open--
		c.answered.Broadcast()
		c.mu.Unlock()
	}
	return err
}

func (c *stdioConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func (c *stdioConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.mu.Lock()
		c.answered.Broadcast()
		c.mu.Unlock()
	})
	return nil
}

func (c *stdioConn) SessionID() string { return c.session }

// withRequestID puts the request's id into its params' _meta (metaRequestID). A message it
// cannot rewrite is returned as it is: the SDK refuses it.
func withRequestID(env *envelope, line []byte) []byte {
	var msg map[string]json.RawMessage
	if json.Unmarshal(line, &msg) != nil {
		return line
	}
	params := map[string]json.RawMessage{}
	if len(env.Params) > 0 && json.Unmarshal(env.Params, &params) != nil {
		return line
	}
	meta := map[string]json.RawMessage{}
	if m, ok := params["_meta"]; ok && json.Unmarshal(m, &meta) != nil {
		return line
	}
	id, _ := json.Marshal(string(env.ID))
	meta[metaRequestID] = id
	params["_meta"], _ = json.Marshal(meta)
	msg["params"], _ = json.Marshal(params)
	out, err := json.Marshal(msg)
	if err != nil {
		return line
	}
	return out
}
