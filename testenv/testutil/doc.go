// Package testutil is what berm's kernel tests share: the root check, the rule for when a
// missing kernel feature may skip a test (and when it must fail it), and the re-executed
// child process that tests use for what cannot be undone in the test process (a seccomp
// filter, a Landlock domain, a process placed in a call's cgroup).
package testutil
