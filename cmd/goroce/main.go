// Command goroce is the command-line front end of goroce: one binary with
// subcommands (goroce help lists them). Each subcommand lives in its own file
// of this package and registers itself in init(); main only dispatches.
//
// This package wires packages together; logic worth testing lives in them.
package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

func main() {
	stop := profile()
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// profile starts a CPU profile when GOROCE_CPUPROFILE is set, written to
// $GOROCE_CPUPROFILE.PID (the PID keeps a server and a client started with
// the same environment apart): how the data path is profiled where only the
// binary runs, such as the bench-vs-rxe guest (docs/performance.md).
func profile() (stop func()) {
	base := os.Getenv("GOROCE_CPUPROFILE")
	if base == "" {
		return func() {}
	}
	name := fmt.Sprintf("%s.%d", base, os.Getpid())
	f, err := os.Create(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goroce: GOROCE_CPUPROFILE: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "goroce: GOROCE_CPUPROFILE: %v\n", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
