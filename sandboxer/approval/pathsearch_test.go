package approval

import (
	"testing"
	"time"
)

// What counts as a PATH search's next try of a denied exec, and what is a real repeat.
func TestPathSearch(t *testing.T) {
	touch := fileID{dev: 1, ino: 7}
	deny := execTry{id: touch, argv: "touch\x00drop\x00", path: "/usr/bin/touch"}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		tid   uint32
		tries []execTry
		at    time.Duration
		want  []bool
	}{
		{"next directory", 1, []execTry{{touch, deny.argv, "/bin/touch"}}, 0, []bool{true}},
		{"every directory once", 1, []execTry{{touch, deny.argv, "/bin/touch"}, {touch, deny.argv, "/usr/local/bin/touch"}}, 0, []bool{true, true}},
		{"the same path again", 1, []execTry{{touch, deny.argv, "/usr/bin/touch"}}, 0, []bool{false}},
		{"a path tried in the search again", 1, []execTry{{touch, deny.argv, "/bin/touch"}, {touch, deny.argv, "/bin/touch"}}, 0, []bool{true, false}},
		{"another thread", 2, []execTry{{touch, deny.argv, "/bin/touch"}}, 0, []bool{false}},
		{"other argv", 1, []execTry{{touch, "touch\x00other\x00", "/bin/touch"}}, 0, []bool{false}},
		{"another file", 1, []execTry{{fileID{dev: 1, ino: 8}, deny.argv, "/bin/touch"}}, 0, []bool{false}},
		{"after the window", 1, []execTry{{touch, deny.argv, "/bin/touch"}}, PathSearchWindow, []bool{false}},
		{"just inside the window", 1, []execTry{{touch, deny.argv, "/bin/touch"}}, PathSearchWindow - time.Millisecond, []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Supervisor{searches: map[uint32]*pathSearch{}}
			s.searchAfterDeny(1, &deny, "req", Denied, t0)
			for i, try := range tc.tries {
				ps, ok := s.continuesSearch(tc.tid, &try, t0.Add(tc.at))
				if ok != tc.want[i] {
					t.Fatalf("try %d (%+v): same action %v, want %v", i, try, ok, tc.want[i])
				}
				if ok && (ps.reqID != "req" || ps.outcome != Denied) {
					t.Fatalf("search %+v", ps)
				}
			}
		})
	}
	// Another exec of the thread ends its search; so does the bound on tries.
	s := &Supervisor{searches: map[uint32]*pathSearch{}}
	s.searchAfterDeny(1, &deny, "req", Denied, t0)
	s.continuesSearch(1, nil, t0)
	if _, ok := s.continuesSearch(1, &execTry{touch, deny.argv, "/bin/touch"}, t0); ok {
		t.Error("a search went on past another exec of the thread")
	}
	s.searchAfterDeny(1, &deny, "req", Denied, t0)
	n := 0
	for i := 0; i < 3*PathSearchMax; i++ {
		if _, ok := s.continuesSearch(1, &execTry{touch, deny.argv, "/p" + itoa(i) + "/touch"}, t0); ok {
			n++
		}
	}
	if n != PathSearchMax {
		t.Errorf("%d tries taken as the same action, want %d", n, PathSearchMax)
	}
}
