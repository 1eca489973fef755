// Package tsharktest runs Wireshark's tshark over captures in tests: it
// finds tshark (skipping the test with a reason when it is absent; CI
// installs it), turns off the RPC-over-RDMA payload heuristic that
// reports short SEND payloads as malformed RPC (wire-spec §13), and parses
// the per-frame fields goroce's tests assert on.
package tsharktest

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Path returns the tshark binary or skips the test.
func Path(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not on PATH (apt-get install tshark); CI installs it")
	}
	return p
}

// HeuristicArgs returns the flags that turn off the RPC-over-RDMA
// heuristic. tshark 4.0 calls it "rpcrdma_infiniband"; wire-spec §13 says
// "rpcordma", which 4.0.17 rejects ("No such protocol").
func HeuristicArgs(t testing.TB, tshark, file string) []string {
	t.Helper()
	for _, name := range []string{"rpcrdma_infiniband", "rpcordma"} {
		out, err := exec.Command(tshark, "--disable-heuristic", name, "-r", file, "-c", "1").CombinedOutput()
		if err == nil && !bytes.Contains(out, []byte("No such protocol")) {
			return []string{"--disable-heuristic", name}
		}
	}
	t.Fatal("tshark knows no RPC-over-RDMA heuristic to disable")
	return nil
}

// SeverityWarn is Wireshark's expert severity PI_WARN (epan/proto.h).
const SeverityWarn = 0x00600000

// Frame is what tshark says of one frame.
type Frame struct {
	Number    int
	Protocols string // frame.protocols, e.g. eth:ethertype:ip:udp:infiniband
	Opcode    string // infiniband.bth.opcode (decimal)
	DestQP    string // infiniband.bth.destqp (hex as tshark prints it)
	PSN       string // infiniband.bth.psn (decimal)
	Severity  int    // highest _ws.expert.severity, 0 when none
	Malformed bool
}

// IsInfiniBand reports whether tshark dissected an InfiniBand layer.
func (f *Frame) IsInfiniBand() bool {
	for _, p := range strings.Split(f.Protocols, ":") {
		if p == "infiniband" {
			return true
		}
	}
	return false
}

// Dissect runs tshark over file and returns one Frame per frame.
func Dissect(t testing.TB, file string) []Frame {
	t.Helper()
	tshark := Path(t)
	args := append(HeuristicArgs(t, tshark, file), "-r", file, "-T", "fields",
		"-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=|",
		"-e", "frame.number", "-e", "frame.protocols",
		"-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn",
		"-e", "_ws.expert.severity", "-e", "_ws.malformed")
	cmd := exec.Command(tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	var frames []Frame
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		c := strings.Split(line, "\t")
		for len(c) < 7 {
			c = append(c, "")
		}
		f := Frame{Protocols: c[1], Opcode: c[2], DestQP: c[3], PSN: c[4], Malformed: c[6] != ""}
		f.Number, _ = strconv.Atoi(c[0])
		for _, s := range strings.Split(c[5], "|") {
			if v, err := strconv.ParseInt(s, 0, 64); err == nil && int(v) > f.Severity {
				f.Severity = int(v)
			}
		}
		frames = append(frames, f)
	}
	return frames
}

// CheckRoCE fails the test unless every frame of file dissects as
// InfiniBand with no malformed packet and no expert info at warning level
// or above. It returns the frames.
func CheckRoCE(t testing.TB, file string) []Frame {
	t.Helper()
	frames := Dissect(t, file)
	if len(frames) == 0 {
		t.Fatalf("tshark found no frames in %s", file)
	}
	bad := 0
	for _, f := range frames {
		if !f.IsInfiniBand() || f.Malformed || f.Severity >= SeverityWarn {
			if bad < 10 {
				t.Errorf("frame %d: protocols %q malformed=%v expert severity %#x", f.Number, f.Protocols, f.Malformed, f.Severity)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d frames in %s are not clean InfiniBand in tshark", bad, len(frames), file)
	}
	return frames
}
