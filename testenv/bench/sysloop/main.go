// Command sysloop makes N cheap syscalls (getppid) and prints the mean cost in ns. It is the
// workload of berm's per-syscall benchmark.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	start := time.Now()
	for i := 0; i < n; i++ {
		syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
	}
	fmt.Printf("%.1f\n", float64(time.Since(start).Nanoseconds())/float64(n))
}
