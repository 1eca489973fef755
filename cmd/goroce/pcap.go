package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/goroce/goroce/hca/link/pcap"
)

func init() {
	register(&command{name: "pcap", summary: "verify RoCE/IB captures, generate golden ones", run: runPcap})
}

const pcapUsage = `Usage: goroce pcap <subcommand> [flags]

Subcommands:
  verify FILE...   check every RoCE/IB packet (lengths, opcode, ICRC, VCRC)
                   in pcap/pcapng files (Ethernet, raw IP, ERF, InfiniBand)
  gen -o DIR       write one capture per encapsulation (roce2-ipv4,
                   roce2-ipv6, roce1, ib, ib-grh) with a packet of every opcode

Run "goroce pcap <subcommand> --help" for flags.
`

func runPcap(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, pcapUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, pcapUsage)
		return exitOK
	case "verify":
		return runPcapVerify(args[1:], stdout, stderr)
	case "gen":
		return runPcapGen(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "goroce pcap: unknown subcommand %q\n", args[0])
	fmt.Fprint(stderr, pcapUsage)
	return exitUsage
}

// runPcapVerify implements `goroce pcap verify`. Exit status: 0 when every
// RoCE/IB packet verified and there was at least one; 1 when some were bad
// or there were none; 2 for a usage error or a file that cannot be read to
// its end. Records of pcapng interfaces goroce cannot read (USB beside the
// Ethernet one, say) are skipped and said, and do not change the status.
func runPcapVerify(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goroce pcap verify", flag.ContinueOnError)
	quiet := fs.Bool("q", false, "list only bad packets (the summary line is always printed)")
	fs.Usage = usageFunc(fs, "goroce pcap verify [-q] FILE...",
		"",
		"Prints one line per RoCE/IB packet: frame number, encapsulation, opcode,",
		"dest QPN, PSN, ICRC ok|BAD (and VCRC ok|BAD for native IB), then",
		"  N ok, M bad, K other[, S skipped]",
		"where other counts frames that are not RoCE/IB (ARP, TCP, ...) and skipped",
		"the records of pcapng interfaces of a link type goroce cannot read (USB,",
		"NULL, ...), said per link type after the packets of their file.",
		"Exit status 0 only when M is 0 and N is not; 2 when a file cannot be read.")
	if status, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return status
	}
	files := fs.Args()
	if len(files) == 0 {
		fmt.Fprintln(stderr, "goroce pcap verify: no capture files given")
		fs.Usage()
		return exitUsage
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	var total pcap.Counts
	readErr := false
	for _, name := range files {
		if len(files) > 1 {
			fmt.Fprintf(out, "==> %s <==\n", name)
		}
		c, err := verifyFile(name, out, pcap.VerifyOptions{Quiet: *quiet})
		total.Add(c)
		if err != nil {
			out.Flush()
			fmt.Fprintf(stderr, "goroce pcap verify: %s: %v\n", name, err)
			readErr = true
		}
	}
	fmt.Fprintln(out, total)
	switch {
	case readErr:
		return exitUsage
	case total.Bad == 0 && total.OK > 0:
		return exitOK
	}
	return exitFail
}

func verifyFile(name string, out io.Writer, opts pcap.VerifyOptions) (pcap.Counts, error) {
	f, err := os.Open(name)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the file name is printed already
		}
		return pcap.Counts{}, err
	}
	defer f.Close()
	return pcap.Verify(f, out, opts)
}

// runPcapGen implements `goroce pcap gen`.
func runPcapGen(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goroce pcap gen", flag.ContinueOnError)
	dir := fs.String("o", "", "output directory (created if missing)")
	seed := fs.Uint64("seed", 1, "seed for PSNs, IP IDs and payload bytes (same seed, same bytes)")
	rd := fs.Bool("rd", false, "also put every RD opcode into the native IB captures")
	fs.Usage = usageFunc(fs, "goroce pcap gen -o DIR [-seed N] [-rd]",
		"",
		"Writes DIR/roce2-ipv4.pcap, roce2-ipv6.pcap, roce1.pcap (LINKTYPE_ETHERNET)",
		"and DIR/ib.pcap, ib-grh.pcap (ERF records of type InfiniBand, which",
		"Wireshark opens), each holding a well-formed packet of every opcode valid",
		"in that encapsulation at path MTU 1024.")
	if status, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return status
	}
	if *dir == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "goroce pcap gen: want -o DIR and no arguments")
		fs.Usage()
		return exitUsage
	}
	caps, err := pcap.Generate(pcap.GenOptions{Seed: *seed, RD: *rd})
	if err != nil {
		fmt.Fprintf(stderr, "goroce pcap gen: %v\n", err)
		return exitFail
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "goroce pcap gen: %v\n", err)
		return exitUsage
	}
	for i := range caps {
		c := &caps[i]
		path := filepath.Join(*dir, c.Name)
		if err := writeCapture(path, c); err != nil {
			fmt.Fprintf(stderr, "goroce pcap gen: %v\n", err)
			return exitFail
		}
		fmt.Fprintf(stdout, "%s: %d packets (%v, link type %d)\n", path, len(c.Packets), c.Kind, c.LinkType)
	}
	return exitOK
}

func writeCapture(path string, c *pcap.GenCapture) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if _, err := c.WriteTo(w); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
