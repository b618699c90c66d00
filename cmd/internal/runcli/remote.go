package runcli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// Remote hands the call to bermd, which launches it with this process's stdio, and waits for
// its end. SIGINT and SIGTERM are passed on: the call ends as interrupted.
func (o *Options) Remote() int {
	msgs := o.MessageWriter()
	msgs.Write(remoteWarnings(o))
	if o.conn != nil {
		defer o.conn.Close() // a call that is not sent
	}
	cleanup, err := o.Resolve()
	defer cleanup()
	if err != nil {
		fmt.Fprintf(msgs, "berm: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stdio := [3]*os.File{os.Stdin, os.Stdout, os.Stderr}
	term, err := o.Terminal()
	if err != nil {
		fmt.Fprintf(msgs, "berm: %v\n", err)
		return 1
	}
	if term != nil {
		// bermd gets the pty's master in place of the caller's terminal, which stays here.
		defer term.Close()
		stdio[0] = term.Master
	}
	var rep *callproto.RawReply
	if o.conn != nil {
		rep, err = o.conn.RunRaw(&o.Request, stdio, sigs)
	} else {
		rep, err = callproto.RunRaw(o.Socket, &o.Request, stdio, sigs)
	}
	if term != nil {
		term.Close()
	}
	if err != nil {
		fmt.Fprintf(msgs, "berm: %v\n", err)
		return 1
	}
	if len(rep.Record) == 0 || string(rep.Record) == "null" {
		// The call did not run (a bad request, a policy that does not compile): berm's own
		// failure, the same status as with the agent embedded.
		fmt.Fprintf(msgs, "berm: %s\n", rep.Error)
		return 1
	}
	end, err := endOf(rep.Record)
	if err != nil {
		fmt.Fprintf(msgs, "berm: bermd's record of the call: %v\n", err)
		return 1
	}
	return o.finish(end, func() ([]byte, error) { return indentRecord(rep.Record) }, rep.ExitStatus, rep.Warning)
}

// remoteWarnings are the flags a call bermd runs does not get.
func remoteWarnings(o *Options) []byte {
	var b []byte
	if len(o.Rules) > 0 || o.NoRules {
		// Not silently: the caller asked for something this call will not get.
		b = append(b, "berm: warning: --rules and --no-rules are for the embedded agent; bermd evaluates its own ruleset (bermd --rules, --no-rules)\n"...)
	}
	if o.ApprovalWebhook != "" {
		b = append(b, "berm: warning: --approval-webhook is for the embedded agent; bermd posts to its own (bermd --approval-webhook)\n"...)
	}
	return b
}

// callEnd is what berm run prints about an ended call: a few fields of its record.
type callEnd struct {
	CallID    string          `json:"call_id"`
	EndReason event.EndReason `json:"end_reason"`
	EndDetail string          `json:"end_detail"`
	Dropped   event.Drop      `json:"dropped"`
}

// endOf reads those fields from a record as bermd sent it (callproto.RawReply).
func endOf(record []byte) (callEnd, error) {
	var e callEnd
	err := json.Unmarshal(record, &e)
	return e, err
}

// indentRecord is the record for --summary, indented as json.MarshalIndent writes a decoded
// record: bermd encoded it with encoding/json, which indents its own compact form that way.
func indentRecord(record []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := json.Indent(&b, record, "", "  "); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Start hands the call to bermd with the given stdio, for a caller that serves calls rather
// than being one (berm mcp): it resolves the call as Remote does and returns it running; the
// caller waits for it (callproto.Call.Wait) and then runs cleanup. Only through bermd:
// ViaDaemon must have said so.
func (o *Options) Start(stdio [3]*os.File) (call *callproto.Call, cleanup func(), err error) {
	conn := o.conn
	o.conn = nil
	cleanup, err = o.Resolve()
	if err == nil && conn == nil {
		conn, err = callproto.Dial(o.Socket)
	}
	if err == nil {
		call, err = conn.Start(&o.Request, stdio)
		conn = nil
	}
	if conn != nil {
		conn.Close()
	}
	if err != nil {
		cleanup()
		return nil, func() {}, err
	}
	return call, cleanup, nil
}
