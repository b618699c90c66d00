package approval

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"
)

// Who may decide a rule's requests (ApprovalRule.Approvers) comes from one root-owned file,
// DefaultApproversFile:
//
//	people:
//	  alice: {user: alice}             # berm approve run as unix user alice (SO_PEERCRED)
//	  chatbot: {tokenSha256: 9f86d0…}  # an API client (a webhook's bot) with a token of its own
//	groups:
//	  payments-oncall: [alice, chatbot]
//
// A rule's approvers name people or groups. An identity comes from the kernel or a secret,
// never from what a client says: a unix user is the API socket peer's uid (the socket is
// then connectable by every user; each request is authenticated), an API client is the
// person whose token's SHA-256 the file lists (the file holds no secret). The node's admin
// token (the root-only DefaultTokenFile) is root's: its holder can read every secret and
// names who decides (--by), and the name is checked like anyone's. A decision by someone a
// rule does not name is refused (403) and recorded in the call's trail (outcome refused);
// the request keeps waiting.
const DefaultApproversFile = "/etc/berm/approvers.yaml"

// Approvers are the people and groups of DefaultApproversFile.
type Approvers struct {
	people map[string]person
	groups map[string][]string
}

type person struct {
	uid    int // -1: none
	token  []byte
	hasTok bool
}

var approverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// LoadApprovers reads the approvers file; an absent file is no approvers (nil): rules'
// approvers are then checked against the names root gives (--by).
func LoadApprovers(path string) (*Approvers, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("approvers: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("approvers: %w", err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	if sys == nil || sys.Uid != 0 || st.Mode().Perm()&0o022 != 0 || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("approvers %s: expected a regular file owned by root, writable by root only, got %s", path, st.Mode())
	}
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("approvers: %w", err)
	}
	return ParseApprovers(path, data)
}

// ParseApprovers reads an approvers file's content.
func ParseApprovers(path string, data []byte) (*Approvers, error) {
	var raw struct {
		People map[string]struct {
			User        string `yaml:"user"`
			TokenSHA256 string `yaml:"tokenSha256"`
		} `yaml:"people"`
		Groups map[string][]string `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("approvers %s: %w", path, err)
	}
	a := &Approvers{people: map[string]person{}, groups: map[string][]string{}}
	for name, p := range raw.People {
		if !approverName.MatchString(name) {
			return nil, fmt.Errorf("approvers %s: person %q: expected a name like payments-oncall", path, name)
		}
		pp := person{uid: -1}
		if p.User != "" {
			u, err := user.Lookup(p.User)
			if err != nil {
				return nil, fmt.Errorf("approvers %s: person %s: %w", path, name, err)
			}
			pp.uid, _ = strconv.Atoi(u.Uid)
		}
		if p.TokenSHA256 != "" {
			h, err := hex.DecodeString(p.TokenSHA256)
			if err != nil || len(h) != sha256.Size {
				return nil, fmt.Errorf("approvers %s: person %s: tokenSha256: expected 64 hex digits", path, name)
			}
			pp.token, pp.hasTok = h, true
		}
		if pp.uid < 0 && !pp.hasTok {
			return nil, fmt.Errorf("approvers %s: person %s: expected a user or a tokenSha256", path, name)
		}
		a.people[name] = pp
	}
	for g, members := range raw.Groups {
		if !approverName.MatchString(g) {
			return nil, fmt.Errorf("approvers %s: group %q: expected a name like payments-oncall", path, g)
		}
		if _, clash := a.people[g]; clash {
			return nil, fmt.Errorf("approvers %s: %s is both a person and a group", path, g)
		}
		for _, m := range members {
			if _, ok := a.people[m]; !ok {
				return nil, fmt.Errorf("approvers %s: group %s: %s is not one of people", path, g, m)
			}
		}
		a.groups[g] = members
	}
	return a, nil
}

// HasUsers says whether some person decides as a unix user (the API socket must then be
// connectable by other users than root).
func (a *Approvers) HasUsers() bool {
	if a == nil {
		return false
	}
	for _, p := range a.people {
		if p.uid >= 0 {
			return true
		}
	}
	return false
}

// byToken is the person whose token this is.
func (a *Approvers) byToken(tok string) (string, bool) {
	if a == nil || tok == "" {
		return "", false
	}
	h := sha256.Sum256([]byte(tok))
	for name, p := range a.people {
		if p.hasTok && subtle.ConstantTimeCompare(h[:], p.token) == 1 {
			return name, true
		}
	}
	return "", false
}

// byUID is the person who is this unix user.
func (a *Approvers) byUID(uid int) (string, bool) {
	if a == nil {
		return "", false
	}
	var names []string
	for name, p := range a.people {
		if p.uid == uid {
			names = append(names, name)
		}
	}
	if len(names) != 1 {
		return "", false // none, or ambiguous
	}
	return names[0], true
}

// May says whether who may decide a request of a rule naming approvers (none: anyone who
// can reach the API).
func (a *Approvers) May(who string, approvers []string) bool {
	if len(approvers) == 0 {
		return true
	}
	if slices.Contains(approvers, who) {
		return true
	}
	if a == nil {
		return false
	}
	for _, g := range approvers {
		if slices.Contains(a.groups[g], who) {
			return true
		}
	}
	return false
}

// ErrNotApprover is a decision by someone the request's rule does not name.
var ErrNotApprover = errors.New("not an approver of this rule")
