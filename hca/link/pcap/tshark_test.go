package pcap

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// Wireshark expert severities (epan/proto.h PI_WARN, PI_ERROR).
const (
	wsSeverityWarn = 0x00600000
)

// tsharkHeuristicArgs returns the flags that turn off Wireshark's
// RPC-over-RDMA payload heuristic, which reports short SEND payloads as
// malformed RPC (wire-spec §13). tshark 4.0 calls it "rpcrdma_infiniband";
// wire-spec §13 says "rpcordma", which 4.0.17 rejects ("No such protocol").
func tsharkHeuristicArgs(t *testing.T, tshark, file string) []string {
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

// Every generated packet must dissect as InfiniBand in Wireshark with the
// opcode, destination QP and PSN we wrote, with no malformed packet and no
// expert info at warning level or above. Wireshark 4.0 has no layout for
// CNP (0x81), FLUSH (0x1C) and ATOMIC_WRITE (0x1D): it shows "Opcode:
// Unknown (N)", DestQP and PSN from the BTH, and everything after the BTH
// (ICRC, and VCRC on native IB, included) as "Unknown/Vendor Specific Data" (infiniband.vendor); for
// those the test checks that field's length instead of the extended headers.
func TestTsharkDissectsGenerated(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not on PATH (apt-get install tshark); CI installs it")
	}
	caps, err := Generate(GenOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range caps {
		t.Run(c.Name, func(t *testing.T) {
			file := filepath.Join(dir, c.Name)
			var buf bytes.Buffer
			if _, err := c.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append(tsharkHeuristicArgs(t, tshark, file), "-r", file, "-T", "fields",
				"-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=|",
				"-e", "frame.number", "-e", "frame.protocols",
				"-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn",
				"-e", "_ws.expert.severity", "-e", "_ws.malformed", "-e", "infiniband.vendor")
			cmd := exec.Command(tshark, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("tshark: %v\n%s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
			if len(lines) != len(c.Packets) {
				t.Fatalf("tshark printed %d frames, capture has %d\n%s", len(lines), len(c.Packets), out)
			}
			for i, line := range lines {
				gp := &c.Packets[i]
				f := strings.Split(line, "\t")
				if len(f) != 8 {
					t.Fatalf("frame %d: %q", i+1, line)
				}
				if !strings.Contains(f[1], "infiniband") {
					t.Errorf("frame %d %v: protocols %q lack infiniband", i+1, gp.Opcode, f[1])
				}
				op, err1 := strconv.ParseUint(f[2], 10, 8)
				qp, err2 := strconv.ParseUint(strings.TrimPrefix(f[3], "0x"), 16, 32)
				psn, err3 := strconv.ParseUint(f[4], 10, 32)
				if err1 != nil || err2 != nil || err3 != nil {
					t.Fatalf("frame %d %v: unparsable %q", i+1, gp.Opcode, line)
				}
				if bth.Opcode(op) != gp.Opcode || bth.QPN(qp) != gp.DestQP || bth.PSN(psn) != gp.PSN {
					t.Errorf("frame %d: tshark says %v qp %#x psn %#x, we wrote %v %v %v",
						i+1, bth.Opcode(op), qp, psn, gp.Opcode, gp.DestQP, gp.PSN)
				}
				for _, s := range strings.Split(f[5], "|") {
					if s == "" {
						continue
					}
					if v, _ := strconv.ParseUint(s, 10, 32); v >= wsSeverityWarn {
						t.Errorf("frame %d %v: expert info severity %#x", i+1, gp.Opcode, v)
					}
				}
				if f[6] != "" || strings.Contains(f[1], "malformed") {
					t.Errorf("frame %d %v: malformed (%q)", i+1, gp.Opcode, line)
				}
				switch gp.Opcode {
				case bth.OpCNP, bth.OpRCFlush, bth.OpRCAtomicWrite:
					var p wire.Packet
					if err := p.Decode(gp.Frame, c.Framing); err != nil {
						t.Fatal(err)
					}
					vend := strings.Split(f[7], "|")
					got := len(vend[len(vend)-1]) / 2
					if want := p.End - p.BTHOff - bth.HeaderLen; got != want {
						t.Errorf("frame %d %v: %d vendor bytes after the BTH, want %d", i+1, gp.Opcode, got, want)
					}
				default:
					if f[7] != "" {
						t.Errorf("frame %d %v: Wireshark fell back to vendor data", i+1, gp.Opcode)
					}
				}
			}
		})
	}
}
