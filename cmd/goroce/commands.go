package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Exit statuses shared by every subcommand.
const (
	exitOK    = 0 // success
	exitFail  = 1 // the command ran and found a failure (bad packets, failed test)
	exitUsage = 2 // bad command line, unreadable input
)

// A command is one `goroce NAME ...` subcommand. To add one, create NAME.go
// in this package with
//
//	func init() { register(&command{name: "NAME", summary: "...", run: runNAME}) }
//
// run receives the arguments after NAME and returns the exit status. It
// writes results to stdout and diagnostics to stderr, and never calls
// os.Exit, so tests can drive it in-process.
type command struct {
	name    string
	summary string // one line for `goroce help`
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]*command{}

// register adds c to the command table; a duplicate name is a programming
// error caught by every test run.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("goroce: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// run is main without the process: it dispatches args to a subcommand and
// returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch name := args[0]; name {
	case "help", "-h", "-help", "--help":
		// `goroce help help` and `goroce help -h` ask for this list too.
		if name == "help" && len(args) > 1 && args[1] != "help" && args[1] != "-h" && args[1] != "-help" && args[1] != "--help" {
			if c, ok := commands[args[1]]; ok {
				return c.run(append(args[2:], "--help"), stdout, stderr)
			}
			fmt.Fprintf(stderr, "goroce: unknown command %q\n", args[1])
			usage(stderr)
			return exitUsage
		}
		usage(stdout)
		return exitOK
	default:
		c, ok := commands[name]
		if !ok {
			fmt.Fprintf(stderr, "goroce: unknown command %q\n", name)
			usage(stderr)
			return exitUsage
		}
		return c.run(args[1:], stdout, stderr)
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: goroce <command> [flags] [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "  help       show this list, or `goroce help <command>`")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `goroce <command> --help` for a command's flags.")
}

// parseFlags parses args with fs (created with flag.ContinueOnError and a
// Usage that prints to fs.Output()). Help goes to stdout with status exitOK;
// a bad flag is reported on stderr with the usage and status exitUsage. ok
// is true when the command should go on.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (status int, ok bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if err == nil {
		fs.SetOutput(stderr)
		return exitOK, true
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return exitOK, false
	}
	fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
	fs.SetOutput(stderr)
	fs.Usage()
	return exitUsage, false
}

// usageFunc returns a FlagSet Usage that prints synopsis and then the flags.
func usageFunc(fs *flag.FlagSet, synopsis ...string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s\n", strings.Join(synopsis, "\n       "))
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(w, "\nFlags:")
			fs.PrintDefaults()
		}
	}
}
