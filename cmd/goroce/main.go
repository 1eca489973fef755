// Command goroce is the command-line front end of goroce: one binary with
// subcommands (goroce help lists them). Each subcommand lives in its own file
// of this package and registers itself in init(); main only dispatches.
//
// This package wires packages together; logic worth testing lives in them.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

func main() {
	stopProfile := profile()
	stopTrace := traceTo()
	ownProcess = true
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	stopTrace()
	stopProfile()
	os.Exit(code)
}

// profile starts a CPU profile when GOROCE_CPUPROFILE is set, written to
// $GOROCE_CPUPROFILE.PID (the PID keeps a server and a client started with
// the same environment apart): how the data path is profiled where only the
// binary runs, such as the bench-vs-rxe guest (docs/performance.md).
func profile() (stop func()) {
	return startTo("GOROCE_CPUPROFILE", pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// traceTo writes a runtime execution trace to $GOROCE_TRACE.PID when
// GOROCE_TRACE is set: where the CPU profile cannot see time spent waiting
// (scheduling delays, system calls, wake-ups), `go tool trace -pprof=sched`
// and `-pprof=syscall` can.
func traceTo() (stop func()) {
	return startTo("GOROCE_TRACE", trace.Start, trace.Stop)
}

// startTo opens $env.PID and starts start on it; stop ends it.
func startTo(env string, start func(io.Writer) error, end func()) (stop func()) {
	base := os.Getenv(env)
	if base == "" {
		return func() {}
	}
	name := fmt.Sprintf("%s.%d", base, os.Getpid())
	f, err := os.Create(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goroce: %s: %v\n", env, err)
		return func() {}
	}
	if err := start(f); err != nil {
		fmt.Fprintf(os.Stderr, "goroce: %s: %v\n", env, err)
		f.Close()
		return func() {}
	}
	return func() {
		end()
		f.Close()
	}
}
