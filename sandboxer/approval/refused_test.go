package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Every refused decision attempt over the API is counted by channel and reason, and each by
// a known identity (not an approver, or claiming another's name) reaches the request's trail
// with who the token is and who was claimed. An attempt with no identity is only counted.
func TestRefusedDecisionsRecordedAndCounted(t *testing.T) {
	eveTok := "eve-token-0123456789abcdef"
	h := sha256.Sum256([]byte(eveTok))
	ap, err := ParseApprovers("test", []byte("people:\n  eve: {tokenSha256: "+hex.EncodeToString(h[:])+"}\n  bob: {tokenSha256: "+hex.EncodeToString(make([]byte, 32))+"}\ngroups:\n  oncall: [bob]\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	b := newBroker(t, Config{Registry: reg, Approvers: ap})
	srv := httptest.NewServer(Handler(b, "admin-token-0123456789"))
	defer srv.Close()
	type refusal struct {
		d       Decision
		claimed string
	}
	trail := make(chan refusal, 10)
	req := &Request{CallID: "c1", Action: "unlink", Object: "/ws/reports/a", Rule: "r", Approvers: []string{"oncall"},
		OnRefused: func(d Decision, claimed string) { trail <- refusal{d, claimed} }}
	done := make(chan Decision, 1)
	go func() { done <- b.Ask(req, time.Minute, nil) }()
	id := waitPending(t, b, 1)[0].ID
	post := func(tok string, body DecideBody) int {
		data, _ := json.Marshal(body)
		r, _ := http.NewRequest("POST", srv.URL+"/v1/approvals/"+id, bytes.NewReader(data))
		r.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		tok     string
		by      string
		code    int
		who     string
		claimed string
	}{
		{eveTok, "", http.StatusForbidden, "eve", ""},           // not an approver of the rule
		{eveTok, "bob", http.StatusForbidden, "eve", "bob"},     // claims an approver's name
		{"not-a-token", "bob", http.StatusUnauthorized, "", ""}, // nobody: counted only
	} {
		if code := post(tc.tok, DecideBody{Decision: "approve", By: tc.by, Reason: "let me"}); code != tc.code {
			t.Fatalf("%+v: %d", tc, code)
		}
		if tc.who == "" {
			continue
		}
		select {
		case r := <-trail:
			if r.d.Outcome != Refused || r.d.By != tc.who || r.claimed != tc.claimed || r.d.Channel != ChannelAPI {
				t.Errorf("%+v: recorded %+v", tc, r)
			}
		default:
			t.Errorf("%+v: not recorded in the call's trail", tc)
		}
	}
	if len(trail) != 0 {
		t.Errorf("%d more refusals recorded", len(trail))
	}
	for why, want := range map[string]float64{RefusedNotApprover: 1, RefusedImpersonation: 1, RefusedUnauthenticated: 1} {
		if v := testutil.ToFloat64(b.metrics.refused.WithLabelValues(ChannelAPI, why)); v != want {
			t.Errorf("refused{api,%s} = %v, want %v", why, v, want)
		}
	}
	if len(b.List()) != 1 {
		t.Fatal("a refused attempt ended the request")
	}
	if n, err := testutil.GatherAndCount(reg, "berm_approval_refused_decisions_total"); err != nil || n != 6 {
		t.Fatalf("refused series exported: %d, %v", n, err)
	}
	b.Decide(id, false, "bob", ChannelAPI, "no")
	<-done
}

// With bermd's access (DecideAccess), an approver who is not the admin token decides only
// the calls of tenants it has the decide right in: another tenant's request is refused and
// stays pending; its own tenant's is decided.
func TestDecisionsNeedTheTenantsDecideRight(t *testing.T) {
	eveTok := "eve-token-0123456789abcdef"
	h := sha256.Sum256([]byte(eveTok))
	ap, err := ParseApprovers("test", []byte("people:\n  eve: {tokenSha256: "+hex.EncodeToString(h[:])+"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	b := newBroker(t, Config{Approvers: ap, DecideAccess: func(uid int, tenant string) error {
		asked = append(asked, tenant)
		if tenant != "beta" {
			return fmt.Errorf("access: uid %d has no \"decide\" right in tenant %q", uid, tenant)
		}
		return nil
	}})
	srv := httptest.NewServer(Handler(b, "admin-token-0123456789"))
	defer srv.Close()
	done := make(chan Decision, 2)
	for _, tenant := range []string{"acme", "beta"} {
		go func() {
			done <- b.Ask(&Request{CallID: "c-" + tenant, Tenant: tenant, Action: "unlink", Object: "/ws/x", Rule: "r"}, time.Minute, nil)
		}()
	}
	pending := waitPending(t, b, 2)
	list := func(tok string) []PendingView {
		r, _ := http.NewRequest("GET", srv.URL+"/v1/approvals", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []PendingView
		json.NewDecoder(resp.Body).Decode(&out)
		return out
	}
	if l := list(eveTok); len(l) != 1 || l[0].Tenant != "beta" {
		t.Fatalf("eve lists %+v, want beta's request only", l)
	}
	if l := list("admin-token-0123456789"); len(l) != 2 {
		t.Fatalf("root lists %d requests, want 2", len(l))
	}
	asked = nil
	for _, tc := range []struct {
		tenant, tok string
		code        int
		body        string
	}{
		{"acme", eveTok, http.StatusForbidden, `no "decide" right in tenant "acme"`},
		{"beta", eveTok, http.StatusNoContent, ""},
		{"acme", "admin-token-0123456789", http.StatusNoContent, ""}, // root decides anything
	} {
		var id string
		for _, p := range pending {
			if p.Tenant == tc.tenant {
				id = p.ID
			}
		}
		data, _ := json.Marshal(DecideBody{Decision: "deny"})
		r, _ := http.NewRequest("POST", srv.URL+"/v1/approvals/"+id, bytes.NewReader(data))
		r.Header.Set("Authorization", "Bearer "+tc.tok)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.body) {
			t.Fatalf("%s by %.3s: %d %q, want %d %q", tc.tenant, tc.tok, resp.StatusCode, body, tc.code, tc.body)
		}
		if tc.code == http.StatusForbidden && len(b.List()) != 2 {
			t.Fatal("a refused decision ended the request")
		}
	}
	<-done
	<-done
	if strings.Join(asked, ",") != "acme,beta" {
		t.Fatalf("DecideAccess asked about %v, want acme then beta (never for the admin token)", asked)
	}
}
