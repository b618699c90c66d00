package prometheus

import (
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The server scrapes a target every second: a counter the test serves is in its answer.
func TestScrapes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE berm_test_total counter\nberm_test_total{where=\"here\"} %d\n", n.Add(1))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	s := ForTest(t, Config{Targets: []string{ln.Addr().String()}})
	got, err := s.Wait(`berm_test_total{job="berm"}`, time.Minute, func(s []Sample) bool { return len(s) == 1 && s[0].Value >= 2 })
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Labels["where"] != "here" || got[0].Labels["instance"] != ln.Addr().String() {
		t.Errorf("series %v", got[0].Labels)
	}
}
