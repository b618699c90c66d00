package collector

// The event schema is defined once, by the Go types of agent/event: the scanner's readers
// (scan_gen.go), the events rows (rows_gen.go), migrations adding new columns and
// agent/event/FIELDS.md follow from it. TestGeneratedUpToDate fails when they drift.
//go:generate go run ./internal/schemagen/cmd -root ..
