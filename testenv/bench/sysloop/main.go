// Command sysloop repeats one operation N times and prints its mean cost in ns: the workload
// of berm's per-syscall, per-open and per-connect benchmarks.
//
//	sysloop N                 getppid
//	sysloop N open PATH       open(PATH, O_RDONLY) + close
//	sysloop N connect ADDR    TCP connect to ADDR (host:port) + close; refused is fine
package main

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"
)

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	op := func() {}
	switch {
	case len(os.Args) == 2:
		op = func() { syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0) }
	case os.Args[2] == "open":
		path := os.Args[3]
		op = func() {
			fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err == nil {
				syscall.Close(fd)
			}
		}
	case os.Args[2] == "connect":
		ap := netip.MustParseAddrPort(os.Args[3])
		sa := &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		op = func() {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				return
			}
			syscall.Connect(fd, sa)
			syscall.Close(fd)
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: sysloop N [open PATH | connect ADDR:PORT]")
		os.Exit(2)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		op()
	}
	fmt.Printf("%.1f\n", float64(time.Since(start).Nanoseconds())/float64(n))
}
