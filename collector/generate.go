package collector

// The event schema is defined once, by the Go types of agent/event: the scanner's readers
// (scan_gen.go), the events rows (rows_gen.go), migrations adding new columns and
// agent/event/FIELDS.md follow from it; then the DDL goldens of testdata/ddl are rewritten
// from the migrations. TestGeneratedUpToDate and TestDDLGolden fail when they drift.
//go:generate go run ./internal/schemagen/cmd -root ..
//go:generate go test -count=1 -run ^TestDDLGolden$ . -update
