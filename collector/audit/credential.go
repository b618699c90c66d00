package audit

import (
	"fmt"

	"github.com/bermsec/berm/agent/event"
)

// credentialDetail is a credential event in a timeline row: name, step, fingerprint, and what
// the step says (never a value: the event holds none).
func credentialDetail(c *event.Credential) string {
	d := fmt.Sprintf("%s %s (fingerprint %s)", Safe(c.Name), Safe(c.Action), Safe(c.Fingerprint))
	if c.Source != "" {
		d += " from " + Safe(c.Source)
	}
	if c.Delivery != "" {
		d += " as " + Safe(c.Delivery)
	}
	if c.Where != "" {
		d += " in " + Safe(c.Where)
	}
	if c.Encoding != "" {
		d += ", " + Safe(c.Encoding)
	}
	if c.OtherCall != "" {
		d += fmt.Sprintf(", issued to call %s of tenant %s", Safe(c.OtherCall), Safe(c.OtherTenant))
	}
	if c.Result != "" {
		d += ": " + Safe(c.Result)
	}
	return d
}
