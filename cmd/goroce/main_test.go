package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// captures returns the real rxe captures kept in the repository (or beside
// it in ../shared).
func captures(t *testing.T) []string {
	t.Helper()
	for _, dir := range []string{"../../wire/testdata/captures", "../../../shared/captures"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.pcap"))
		if len(files) > 0 {
			return files
		}
	}
	t.Skip("no rxe captures: neither wire/testdata/captures nor ../shared/captures exists")
	return nil
}

func runCLI(args ...string) (status int, stdout, stderr string) {
	var o, e bytes.Buffer
	status = run(args, &o, &e)
	return status, o.String(), e.String()
}

var summaryRE = regexp.MustCompile(`^(\d+) ok, (\d+) bad, (\d+) other$`)

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func TestCLIUsage(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		status     int
		stdoutHas  string
		stderrHas  string
		stderrLine bool // the error is one line before the usage
	}{
		{nil, 2, "", "Usage: goroce", false},
		{[]string{"help"}, 0, "pcap", "", false},
		{[]string{"--help"}, 0, "Usage: goroce <command>", "", false},
		{[]string{"-h"}, 0, "Commands:", "", false},
		{[]string{"help", "pcap"}, 0, "verify FILE", "", false},
		{[]string{"help", "nope"}, 2, "", `unknown command "nope"`, true},
		{[]string{"help", "help"}, 0, "Commands:", "", false},
		{[]string{"help", "-h"}, 0, "Commands:", "", false},
		{[]string{"help", "--help"}, 0, "Commands:", "", false},
		{[]string{"frobnicate"}, 2, "", `goroce: unknown command "frobnicate"`, true},
		{[]string{"pcap"}, 2, "", "Subcommands:", false},
		{[]string{"pcap", "--help"}, 0, "gen -o DIR", "", false},
		{[]string{"pcap", "bogus"}, 2, "", `unknown subcommand "bogus"`, true},
		{[]string{"pcap", "verify", "--help"}, 0, "N ok, M bad, K other", "", false},
		{[]string{"pcap", "verify"}, 2, "", "no capture files", true},
		{[]string{"pcap", "verify", "-x"}, 2, "", "flag provided but not defined", true},
		{[]string{"pcap", "gen", "-h"}, 0, "-seed", "", false},
		{[]string{"pcap", "gen"}, 2, "", "want -o DIR", true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			status, out, errOut := runCLI(tc.args...)
			if status != tc.status {
				t.Fatalf("status %d, want %d\nstdout %s\nstderr %s", status, tc.status, out, errOut)
			}
			if !strings.Contains(out, tc.stdoutHas) || !strings.Contains(errOut, tc.stderrHas) {
				t.Fatalf("stdout %q\nstderr %q", out, errOut)
			}
			if tc.stdoutHas == "" && out != "" {
				t.Fatalf("unexpected stdout %q", out)
			}
			if tc.stderrLine && !strings.Contains(strings.SplitN(errOut, "\n", 2)[0], tc.stderrHas) {
				t.Fatalf("first stderr line %q lacks %q", strings.SplitN(errOut, "\n", 2)[0], tc.stderrHas)
			}
		})
	}
}

func TestCLIVerifyCaptures(t *testing.T) {
	files := captures(t)
	status, out, errOut := runCLI(append([]string{"pcap", "verify"}, files...)...)
	if status != 0 || errOut != "" {
		t.Fatalf("status %d stderr %q\n%s", status, errOut, lastLine(out))
	}
	m := summaryRE.FindStringSubmatch(lastLine(out))
	if m == nil || m[2] != "0" || m[1] == "0" {
		t.Fatalf("summary %q", lastLine(out))
	}
	if strings.Count(out, "==> ") != len(files) {
		t.Fatal("missing per-file headers")
	}
	// One capture alone: no header, and the documented line layout.
	status, out, _ = runCLI("pcap", "verify", filepath.Join(filepath.Dir(files[0]), "rc_pingpong.pcap"))
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if status != 0 || len(lines) != 21 || lines[20] != "20 ok, 0 bad, 13 other" {
		t.Fatalf("status %d, %d lines, last %q", status, len(lines), lastLine(out))
	}
	lineRE := regexp.MustCompile(`^ +\d+ roce2-ipv4 RC_(SEND_ONLY|ACKNOWLEDGE) +qp=0x[0-9a-f]{6} psn=0x[0-9a-f]{6} ICRC ok$`)
	for _, l := range lines[:20] {
		if !lineRE.MatchString(l) {
			t.Fatalf("line %q", l)
		}
	}
}

func TestCLIVerifyBadAndBroken(t *testing.T) {
	files := captures(t)
	orig, err := os.ReadFile(filepath.Join(filepath.Dir(files[0]), "send_bw.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Flip one byte inside the payload of the last RC SEND ONLY: the frame
	// ends with 64 payload bytes + 4 ICRC bytes; the file's last frames are
	// an ACK (no payload) and the TCP teardown, so find it from the output.
	status, out, _ := runCLI("pcap", "verify", filepath.Join(filepath.Dir(files[0]), "send_bw.pcap"))
	if status != 0 {
		t.Fatal(out)
	}
	flipped := append([]byte{}, orig...)
	// Frame records: walk the pcap to the first RC_SEND_ONLY frame.
	idx := frameOffset(t, flipped, firstFrameNumber(t, out, "RC_SEND_ONLY"))
	flipped[idx+14+20+8+12+10] ^= 0x40 // Ethernet, IPv4, UDP, BTH, then payload byte 10
	bad := filepath.Join(dir, "flipped.pcap")
	truncated := filepath.Join(dir, "truncated.pcap")
	if err := os.WriteFile(bad, flipped, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(truncated, orig[:len(orig)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	notPcap := filepath.Join(dir, "notes.txt")
	_ = os.WriteFile(notPcap, []byte("not a capture at all\n"), 0o644)

	status, out, errOut := runCLI("pcap", "verify", bad)
	if status != 1 || lastLine(out) != "39 ok, 1 bad, 31 other" || !strings.Contains(out, "ICRC BAD") || errOut != "" {
		t.Fatalf("flipped: status %d stderr %q\n%s", status, errOut, out)
	}
	for _, tc := range []struct {
		name, file, errHas string
	}{
		{"missing", filepath.Join(dir, "nope.pcap"), "no such file"},
		{"truncated", truncated, "truncated"},
		{"not a capture", notPcap, "not a pcap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out, errOut := runCLI("pcap", "verify", tc.file)
			if status != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.errHas) {
				t.Fatalf("status %d stderr %q", status, errOut)
			}
			if !summaryRE.MatchString(lastLine(out)) {
				t.Fatalf("no summary line: %q", out)
			}
		})
	}
	// A file without any RoCE frame is not a pass.
	empty := filepath.Join(dir, "empty.pcap")
	_ = os.WriteFile(empty, orig[:24], 0o644)
	if status, out, _ := runCLI("pcap", "verify", empty); status != 1 || lastLine(out) != "0 ok, 0 bad, 0 other" {
		t.Fatalf("empty capture: %d %q", status, out)
	}
}

func firstFrameNumber(t *testing.T, out, opcode string) int {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[2] == opcode {
			var n int
			for _, c := range f[0] {
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	t.Fatalf("no %s in output", opcode)
	return 0
}

// frameOffset returns the file offset of frame n's data in a little-endian
// classic pcap.
func frameOffset(t *testing.T, b []byte, n int) int {
	t.Helper()
	off := 24
	for i := 1; ; i++ {
		if off+16 > len(b) {
			t.Fatalf("no frame %d", n)
		}
		caplen := int(b[off+8]) | int(b[off+9])<<8 | int(b[off+10])<<16 | int(b[off+11])<<24
		if i == n {
			return off + 16
		}
		off += 16 + caplen
	}
}

func TestCLIGenThenVerify(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	status, out, errOut := runCLI("pcap", "gen", "-o", dir)
	if status != 0 || errOut != "" {
		t.Fatalf("gen: %d %q", status, errOut)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.pcap"))
	want := []string{"ib-grh.pcap", "ib.pcap", "roce1.pcap", "roce2-ipv4.pcap", "roce2-ipv6.pcap"}
	if len(files) != len(want) {
		t.Fatalf("files %v\n%s", files, out)
	}
	for i, f := range files {
		if filepath.Base(f) != want[i] {
			t.Fatalf("files %v", files)
		}
	}
	status, out, errOut = runCLI(append([]string{"pcap", "verify"}, files...)...)
	m := summaryRE.FindStringSubmatch(lastLine(out))
	if status != 0 || errOut != "" || m == nil || m[2] != "0" || m[3] != "0" {
		t.Fatalf("verify: %d %q %q", status, errOut, lastLine(out))
	}
	if !strings.Contains(out, " ib         RC_ACKNOWLEDGE") || !strings.Contains(out, "VCRC ok") ||
		!strings.Contains(out, "roce2-ipv6 CNP") || strings.Contains(out, "roce1      CNP") {
		t.Fatalf("unexpected verify output:\n%s", out)
	}
}
