package approval

import (
	"time"
)

// A shell's PATH search is not a retry storm. Refused one directory's program, dash (and
// execvp) tries the next directory of PATH at once: /usr/bin/touch denied, then /bin/touch,
// the same file on a merged-/usr system. Asked about anew that would be a second request; as a
// repeat of a just-denied action it raised the retry-storm alert on every ordinary denial.
//
// The same action, precisely: an exec by the same thread whose previous held exec was a
// gated program denied (by a person, the timeout, or as a repeat), of the same file (dev,
// ino) with the same argv bytes, by a path that thread has not tried since that deny, within
// PathSearchWindow of the last deny of the search and at most PathSearchMax times. It is
// denied at once, with no request and no alert (outcome SameAction, and an approval-surface
// denial): the decision already made stands. Any other exec of the thread ends the search,
// except one of no file (the PATH directories without the program, which fail with ENOENT
// and run nothing).
// A real repeat still alerts: the same path again (a loop retrying), another thread or
// process (the shell asked again for its next command: a new child), or after the window.
//
// What it gives a hostile tool: nothing runs that was not approved; at most PathSearchMax
// refused attempts by new spellings of the path go without the alert (each is still a
// denial in the trail). A thread id reused within the window by a thread doing the same
// exec is taken for the search's thread (no alert, still denied).
const (
	PathSearchWindow = 5 * time.Second
	PathSearchMax    = 16
	// pathSearchesMax bounds the threads remembered at once (a fork flood of denied execs):
	// past it a thread's next attempt is judged as a repeat, as before.
	pathSearchesMax = 4096
)

// SameAction is the outcome of a PATH search's next try of an exec just denied: denied at
// once, as the action it is.
const SameAction = "same-action"

// execTry is what a held exec was, for the search: its file, argv and path.
type execTry struct {
	id   fileID
	argv string
	path string
}

// pathSearch is a thread's search after a deny.
type pathSearch struct {
	id      fileID
	argv    string
	tried   map[string]bool
	until   time.Time
	n       int
	reqID   string // the request whose decision stands
	outcome string
}

// continues says whether try is the next step of tid's search (and takes the step), under
// s.mu. Any other exec of the thread ends its search.
func (s *Supervisor) continuesSearch(tid uint32, try *execTry, now time.Time) (*pathSearch, bool) {
	ps := s.searches[tid]
	if ps == nil {
		return nil, false
	}
	if try == nil || try.id != ps.id || try.argv != ps.argv || ps.tried[try.path] || !now.Before(ps.until) || ps.n >= PathSearchMax {
		delete(s.searches, tid)
		return nil, false
	}
	ps.tried[try.path] = true
	ps.n++
	ps.until = now.Add(PathSearchWindow)
	return ps, true
}

// searchAfterDeny starts (or restarts) tid's search after its exec try was denied, under
// s.mu.
func (s *Supervisor) searchAfterDeny(tid uint32, try *execTry, reqID, outcome string, now time.Time) {
	if try == nil {
		return
	}
	if len(s.searches) >= pathSearchesMax {
		for t, ps := range s.searches {
			if !now.Before(ps.until) {
				delete(s.searches, t)
			}
		}
		if len(s.searches) >= pathSearchesMax {
			return
		}
	}
	s.searches[tid] = &pathSearch{id: try.id, argv: try.argv, tried: map[string]bool{try.path: true},
		until: now.Add(PathSearchWindow), reqID: reqID, outcome: outcome}
}
