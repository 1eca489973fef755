package pcap

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/wire"
)

// Frame counts from shared/captures/README.md (frames, RoCEv2 frames).
var captureCounts = map[string][2]int{
	"rc_pingpong.pcap":     {33, 20},
	"rc_pingpong_4k.pcap":  {43, 30},
	"uc_pingpong.pcap":     {24, 10},
	"ud_pingpong.pcap":     {23, 10},
	"send_bw_8k.pcap":      {212, 180},
	"read_bw_8k.pcap":      {221, 180},
	"atomic_cs.pcap":       {81, 40},
	"rping.pcap":           {43, 41},
	"udaddy.pcap":          {10, 8},
	"send_bw_8k_loss.pcap": {265, 231},
}

func TestVerifyRealCaptures(t *testing.T) {
	for _, file := range captureFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			var out bytes.Buffer
			c, err := Verify(bytes.NewReader(readFile(t, file)), &out, VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Bad != 0 || c.OK == 0 {
				t.Fatalf("%v\n%s", c, out.String())
			}
			if n := strings.Count(out.String(), "\n"); n != c.OK {
				t.Fatalf("%d lines for %d good frames", n, c.OK)
			}
			if want, ok := captureCounts[filepath.Base(file)]; ok {
				if c.OK != want[1] || c.OK+c.Other != want[0] {
					t.Fatalf("%v, README says %d frames of which %d RoCE", c, want[0], want[1])
				}
			}
		})
	}
}

func TestVerifyLine(t *testing.T) {
	file := captureFiles(t)[0]
	dir := filepath.Dir(file)
	var out bytes.Buffer
	if _, err := Verify(bytes.NewReader(readFile(t, filepath.Join(dir, "rc_pingpong.pcap"))), &out, VerifyOptions{}); err != nil {
		t.Fatal(err)
	}
	first := strings.SplitN(out.String(), "\n", 2)[0]
	want := "    13 roce2-ipv4 RC_SEND_ONLY                      qp=0x000029 psn=0x6698b8 ICRC ok"
	if first != want {
		t.Fatalf("first line\n got %q\nwant %q", first, want)
	}
}

// flip returns a copy of the capture with one byte of the payload of the
// n-th RoCE frame inverted.
func flipPayloadByte(t *testing.T, file []byte, n int) []byte {
	t.Helper()
	r, err := NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	var (
		f Frame
		p wire.Packet
	)
	seen := 0
	for {
		if err := r.Next(&f); err != nil {
			t.Fatalf("no RoCE frame %d with payload: %v", n, err)
		}
		framing, ok := FramingFor(f.Format)
		if !ok || p.Decode(f.Data, framing) != nil || p.PayloadLen == 0 {
			continue
		}
		if seen++; seen < n {
			continue
		}
		// f.Data aliases the reader's buffer; find the frame in the file.
		i := bytes.Index(file, f.Data)
		if i < 0 {
			t.Fatal("frame not found in file")
		}
		out := append([]byte{}, file...)
		out[i+p.PayloadOff+p.PayloadLen/2] ^= 0xFF
		return out
	}
}

func TestVerifyFlippedByte(t *testing.T) {
	for _, tc := range []struct {
		name string
		file func(t *testing.T) []byte
		line string
	}{
		{"roce2-ipv4", func(t *testing.T) []byte {
			return readFile(t, filepath.Join(filepath.Dir(captureFiles(t)[0]), "send_bw.pcap"))
		}, "ICRC BAD"},
		{"roce2-ipv6", func(t *testing.T) []byte {
			return readFile(t, filepath.Join(filepath.Dir(captureFiles(t)[0]), "rc_pingpong_ipv6.pcap"))
		}, "ICRC BAD"},
		{"ib", func(t *testing.T) []byte {
			return readFile(t, vectorFile(t, "wireshark_sample_infiniband_erf.pcap"))
		}, "ICRC BAD VCRC BAD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file(t)
			bad := flipPayloadByte(t, file, 3)
			var good, out bytes.Buffer
			c0, err := Verify(bytes.NewReader(file), &good, VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c, err := Verify(bytes.NewReader(bad), &out, VerifyOptions{Quiet: true})
			if err != nil {
				t.Fatal(err)
			}
			if c.Bad != 1 || c.OK != c0.OK-1 || c.Other != c0.Other {
				t.Fatalf("flipped: %v, original %v", c, c0)
			}
			if !strings.Contains(out.String(), tc.line) || strings.Count(out.String(), "\n") != 1 {
				t.Fatalf("quiet output %q, want one line with %q", out.String(), tc.line)
			}
		})
	}
}

func TestVerifyMalformed(t *testing.T) {
	good := append([]byte{}, readRequestFrame...)
	badLen := append([]byte{}, readRequestFrame...)
	badLen[38+1] = 0x30 // UDP length beyond the IP packet
	badICRC := append([]byte{}, readRequestFrame...)
	badICRC[len(badICRC)-1] ^= 1
	unknownOp := append([]byte{}, readRequestFrame...)
	unknownOp[42] = 0x15
	arp := make([]byte, 60)
	copy(arp[12:], []byte{0x08, 0x06})
	file := writeCapture(t, LinkTypeEthernet, good, badLen, badICRC, arp, unknownOp)
	var out bytes.Buffer
	c, err := Verify(bytes.NewReader(file), &out, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c != (Counts{OK: 1, Bad: 3, Other: 1}) {
		t.Fatalf("%v\n%s", c, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("lines:\n%s", out.String())
	}
	for i, want := range []string{"ICRC ok", "BAD: wire: inconsistent length", "ICRC BAD", "BAD: wire: unknown BTH opcode"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q lacks %q", i, lines[i], want)
		}
	}
	if c.String() != "1 ok, 3 bad, 1 other" {
		t.Fatalf("summary %q", c.String())
	}
}

func TestVerifySnapLength(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, LinkTypeEthernet)
	if err := w.WriteFrameLen(GenEpoch, readRequestFrame[:60], len(readRequestFrame)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c, err := Verify(&buf, &out, VerifyOptions{})
	if err != nil || c.Bad != 1 || !strings.Contains(out.String(), "snap length") {
		t.Fatalf("%v %v %q", c, err, out.String())
	}
}

func TestVerifyTruncatedFile(t *testing.T) {
	file := readFile(t, filepath.Join(filepath.Dir(captureFiles(t)[0]), "rc_pingpong.pcap"))
	var out bytes.Buffer
	c, err := Verify(bytes.NewReader(file[:len(file)-10]), &out, VerifyOptions{})
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("err = %v, want ErrTruncated", err)
	}
	if !strings.Contains(err.Error(), "after frame 32") {
		t.Fatalf("error %q does not say where", err)
	}
	if c.OK == 0 {
		t.Fatal("frames before the cut were not counted")
	}
}

func TestVerifyGenerated(t *testing.T) {
	caps, err := Generate(GenOptions{Seed: 7, RD: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caps {
		var file, out bytes.Buffer
		if _, err := c.WriteTo(&file); err != nil {
			t.Fatal(err)
		}
		cnt, err := Verify(&file, &out, VerifyOptions{})
		if err != nil || cnt.Bad != 0 || cnt.Other != 0 || cnt.OK != len(c.Packets) {
			t.Fatalf("%s: %v %v\n%s", c.Name, cnt, err, out.String())
		}
		if c.Kind == wire.KindIB && !strings.Contains(out.String(), "RD_SEND_ONLY ") {
			t.Fatalf("%s lacks RD with GenOptions.RD", c.Name)
		}
	}
}

// A pcapng file may hold interfaces goroce cannot read beside its Ethernet
// one (dumpcap -i eth0 -i usbmon1): their records are skipped, counted per
// link type and said, and every RoCE record around them is verified, as
// tshark shows them all. Verify stopped at the first USB record with an
// error, having verified none of the RoCE frames after it.
// testdata/rc_pingpong_usb.pcapng is rc_pingpong.pcap with 8 USB
// (LINKTYPE_USB_LINUX, 189) and 2 LINKTYPE_NULL records interleaved
// (testdata/rc_pingpong_usb.py).
func TestVerifySkipsUnsupportedInterfaces(t *testing.T) {
	file := readFile(t, filepath.Join("testdata", "rc_pingpong_usb.pcapng"))
	var out bytes.Buffer
	c, err := Verify(bytes.NewReader(file), &out, VerifyOptions{})
	if err != nil {
		t.Fatalf("Verify: %v\n%s", err, out.String())
	}
	if c != (Counts{OK: 20, Other: 13, Skipped: 10}) {
		t.Fatalf("%v\n%s", c, out.String())
	}
	if c.String() != "20 ok, 0 bad, 13 other, 10 skipped" {
		t.Fatalf("summary %q", c.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 22 {
		t.Fatalf("%d lines, want 20 packets and 2 skip lines:\n%s", len(lines), out.String())
	}
	// The frame numbers are the file's (Wireshark's), skipped records
	// included: rc_pingpong.pcap's frame 13 is record 17 here (tshark
	// shows it as frame 17 too).
	if want := "    17 roce2-ipv4 RC_SEND_ONLY                      qp=0x000029 psn=0x6698b8 ICRC ok"; lines[0] != want {
		t.Fatalf("first line\n got %q\nwant %q", lines[0], want)
	}
	for i, want := range []string{
		"skipped 8 records of link type 189, which goroce cannot read",
		"skipped 2 records of link type 0, which goroce cannot read",
	} {
		if got := lines[20+i]; got != want {
			t.Fatalf("skip line %d\n got %q\nwant %q", i, got, want)
		}
	}
	// Quiet lists no good packet but still says what it skipped.
	out.Reset()
	if c2, err := Verify(bytes.NewReader(file), &out, VerifyOptions{Quiet: true}); err != nil || c2 != c {
		t.Fatalf("quiet: %v %v", c2, err)
	}
	if got := strings.Join(lines[20:], "\n") + "\n"; out.String() != got {
		t.Fatalf("quiet output %q, want %q", out.String(), got)
	}
	// A file cut inside a later record still says what it skipped before.
	out.Reset()
	c3, err := Verify(bytes.NewReader(file[:len(file)-10]), &out, VerifyOptions{Quiet: true})
	if !errors.Is(err, ErrTruncated) || c3.Skipped != 10 || !strings.Contains(out.String(), "skipped 8 records of link type 189") {
		t.Fatalf("truncated: %v %v %q", c3, err, out.String())
	}
}
