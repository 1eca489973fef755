// Command goroce is the command-line front end of goroce: one binary with
// subcommands (goroce help lists them). Each subcommand lives in its own file
// of this package and registers itself in init(); main only dispatches.
//
// This package wires packages together; logic worth testing lives in them.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
