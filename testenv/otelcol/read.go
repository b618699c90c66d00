package otelcol

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
)

// Span is a span as the collector wrote it (OTLP JSON: ids in hex).
type Span struct {
	TraceID            string  `json:"traceId"`
	SpanID             string  `json:"spanId"`
	ParentSpanID       string  `json:"parentSpanId"`
	Flags              uint32  `json:"flags"`
	Name               string  `json:"name"`
	Kind               int     `json:"kind"`
	StartTimeUnixNano  string  `json:"startTimeUnixNano"`
	EndTimeUnixNano    string  `json:"endTimeUnixNano"`
	Attributes         Attrs   `json:"attributes"`
	Events             []Event `json:"events"`
	DroppedEventsCount uint32  `json:"droppedEventsCount"`
	Status             struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	Resource Attrs `json:"-"`
}

// Event is a span event.
type Event struct {
	TimeUnixNano string `json:"timeUnixNano"`
	Name         string `json:"name"`
	Attributes   Attrs  `json:"attributes"`
}

// Log is a log record.
type Log struct {
	TimeUnixNano   string `json:"timeUnixNano"`
	SeverityNumber int    `json:"severityNumber"`
	SeverityText   string `json:"severityText"`
	EventName      string `json:"eventName"`
	Body           Value  `json:"body"`
	Attributes     Attrs  `json:"attributes"`
	TraceID        string `json:"traceId"`
	SpanID         string `json:"spanId"`
}

// Value is an OTLP AnyValue.
type Value struct {
	StringValue *string `json:"stringValue"`
	IntValue    *string `json:"intValue"` // JSON carries int64 as a string
	BoolValue   *bool   `json:"boolValue"`
	ArrayValue  *struct {
		Values []Value `json:"values"`
	} `json:"arrayValue"`
}

// String is the value as text.
func (v Value) String() string {
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.IntValue != nil:
		return *v.IntValue
	case v.BoolValue != nil:
		return strconv.FormatBool(*v.BoolValue)
	case v.ArrayValue != nil:
		s := "["
		for i, x := range v.ArrayValue.Values {
			if i > 0 {
				s += " "
			}
			s += x.String()
		}
		return s + "]"
	}
	return ""
}

// Attrs are key-value attributes.
type Attrs []struct {
	Key   string `json:"key"`
	Value Value  `json:"value"`
}

// Get is the attribute k as text, and whether it is there.
func (a Attrs) Get(k string) (string, bool) {
	for _, kv := range a {
		if kv.Key == k {
			return kv.Value.String(), true
		}
	}
	return "", false
}

type line struct {
	ResourceSpans []struct {
		Resource struct {
			Attributes Attrs `json:"attributes"`
		} `json:"resource"`
		ScopeSpans []struct {
			Spans []Span `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
	ResourceLogs []struct {
		ScopeLogs []struct {
			LogRecords []Log `json:"logRecords"`
		} `json:"scopeLogs"`
	} `json:"resourceLogs"`
}

// Read is every span and log record in the collector's file so far.
func (c *Collector) Read() ([]Span, []Log, error) {
	f, err := os.Open(c.File)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var spans []Span
	var logs []Log
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			// The file exporter writes whole lines; a partial last one is being written.
			return spans, logs, fmt.Errorf("otelcol file: %w", err)
		}
		for _, rs := range l.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					s.Resource = rs.Resource.Attributes
					spans = append(spans, s)
				}
			}
		}
		for _, rl := range l.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				logs = append(logs, sl.LogRecords...)
			}
		}
	}
	return spans, logs, sc.Err()
}
