package approval

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// Webhook POSTs each request as JSON to URL, signed so the receiver (a chat bot, a UI) knows
// it came from this node: the X-Berm-Signature header is "sha256=" and the hex HMAC-SHA256,
// keyed with Secret, of the X-Berm-Timestamp header's value, a '.', and the body. The
// timestamp in the signed text lets a receiver refuse replays of an old request.
type Webhook struct {
	URL    string
	Secret []byte
	Client *http.Client // nil: a client with a 10 s timeout
	Log    *slog.Logger
}

// WebhookBody is what the webhook POSTs.
type WebhookBody struct {
	Type    string  `json:"type"` // "approval.request"
	Request Request `json:"request"`
}

// Signature is the X-Berm-Signature value for body sent at timestamp ts.
func Signature(secret []byte, ts string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// VerifySignature checks a received request's signature in constant time.
func VerifySignature(secret []byte, ts string, body []byte, sig string) bool {
	return hmac.Equal([]byte(Signature(secret, ts, body)), []byte(sig))
}

// Send posts r in the background: a slow or absent receiver never holds the call longer than
// its timeout (which runs regardless).
func (w *Webhook) Send(r Request) {
	body, err := json.Marshal(WebhookBody{Type: "approval.request", Request: r})
	if err != nil {
		return
	}
	go func() {
		if err := w.post(body); err != nil && w.Log != nil {
			w.Log.Warn("approval webhook", "id", r.ID, "err", err)
		}
	}()
}

func (w *Webhook) post(body []byte) error {
	c := w.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequest(http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Berm-Timestamp", ts)
	req.Header.Set("X-Berm-Signature", Signature(w.Secret, ts, body))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", w.URL, resp.Status)
	}
	return nil
}
