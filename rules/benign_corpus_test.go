package rules

import "testing"

// The recorded benchmark corpus is ordinary developer work (corpusWorkload, from real calls):
// the shipped ruleset raises no alert on it. Offline, so it runs everywhere; the same workload
// runs for real in TestE2EBenignWorkload.
func TestShippedQuietOnRecordedWorkload(t *testing.T) {
	evs := loadCorpus(t)
	set, err := Shipped()
	if err != nil {
		t.Fatal(err)
	}
	eng := NewEngine(set, nil)
	for i := range evs {
		for _, a := range eng.Eval(&evs[i]) {
			b := evs[i]
			t.Errorf("alert %s on %s event of call %s: %s", a.Alert.RuleID, b.Kind, b.CallID, a.Alert.Output)
		}
	}
}
