// Package csan drives berm's C programs, the front (cmd/berm/main.c) and the tool's stage
// (cmd/berm-stage/main.c), built with AddressSanitizer and UndefinedBehaviorSanitizer, with
// hostile input: argv and environments as large as the kernel passes, entries without '=',
// invalid UTF-8 and empty strings; a fake bermd that checks what the front sends and answers
// with broken frames; the stage's configuration truncated at every offset, with lengths
// that overflow, and random bytes. Its tests fail on any sanitizer report. See
// testenv/fuzz/README.md for berm's fuzz tests, of which this is the C side.
package csan
