// Command berm-stack is make stack: ClickHouse, berm-collector, bermd, Prometheus and Grafana
// (with berm's plugin and dashboards) on loopback, from the test harnesses of testenv, until
// Ctrl-C or make stack-down. README.md beside this file.
//
//	berm-stack up --bin bin --dir .stack     # start (or say where the running one is)
//	berm-stack down --dir .stack             # stop the running one
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "berm-stack:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 || (args[0] != "up" && args[0] != "down") {
		return errors.New("usage: berm-stack up|down [--bin DIR] [--dir DIR] [--no-grafana]")
	}
	fs := flag.NewFlagSet("berm-stack "+args[0], flag.ContinueOnError)
	bin := fs.String("bin", "bin", "make build's bin/ (bermd, berm-collector, berm-init, grafana/)")
	dir := fs.String("dir", ".stack", "the stack's state: data, journal, logs")
	noGrafana := fs.Bool("no-grafana", false, "leave Grafana out")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if args[0] == "down" {
		return down(abs, out)
	}
	if in, ok := Running(abs); ok {
		fmt.Fprintf(out, "berm stack already running (pid %d):\n", in.PID)
		printInfo(out, in)
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintln(out, "berm stack starting (Grafana's first start builds it: minutes; cached after)...")
	s, err := Up(ctx, Config{Bin: *bin, Dir: abs, Grafana: !*noGrafana})
	if err != nil {
		return err
	}
	defer s.Down()
	printInfo(out, &s.Info)
	fmt.Fprintln(out, "\nstop it with Ctrl-C here, or make stack-down")
	<-ctx.Done()
	fmt.Fprintln(out, "berm stack stopping")
	return nil
}

func printInfo(w io.Writer, in *Info) {
	if in.Grafana != "" {
		fmt.Fprintf(w, "  Grafana      %s  (user %s, password %s; dashboards in the folder berm)\n", in.Grafana, in.GrafanaUser, in.GrafanaPass)
	}
	if in.Prometheus != "" {
		fmt.Fprintf(w, "  Prometheus   %s  (scrapes bermd and berm-collector)\n", in.Prometheus)
	}
	fmt.Fprintf(w, "  ClickHouse   %s  (HTTP %s)\n", in.ClickHouse, in.ClickHTTP)
	fmt.Fprintf(w, "  bermd        socket %s, metrics http://%s/metrics, journal %s\n", in.Socket, in.BermdMetric, in.StateDir)
	fmt.Fprintf(w, "  collector    metrics http://%s/metrics\n", in.Collector)
	fmt.Fprintf(w, "  logs         %s\n", in.Logs)
	fmt.Fprintf(w, "  a call:      bin/berm run --socket %s --daemon required --tool demo -- /bin/cat /etc/hostname\n", in.Socket)
	fmt.Fprintf(w, "  its trail:   bin/berm calls --source %s\n", in.ClickHouse)
}

// down stops the stack of dir (SIGTERM to its owner) and waits, a minute at most, for it to go.
func down(dir string, out io.Writer) error {
	in, ok := Running(dir)
	if !ok {
		fmt.Fprintf(out, "no berm stack running in %s\n", dir)
		return nil
	}
	if err := syscall.Kill(in.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop pid %d: %w", in.PID, err)
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if syscall.Kill(in.PID, 0) != nil {
			fmt.Fprintln(out, "berm stack stopped")
			return nil
		}
	}
	return fmt.Errorf("the stack (pid %d) did not stop in a minute", in.PID)
}
