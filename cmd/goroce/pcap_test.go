package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const mixedCapture = "../../hca/link/pcap/testdata/rc_pingpong_usb.pcapng"

// `goroce pcap verify` of a pcapng file whose Ethernet records interleave
// with those of interfaces goroce cannot read (USB, LINKTYPE_NULL) skips
// those, says how many per link type, verifies every RoCE packet and
// passes when they all verify: it stopped at the first USB record, exit
// status 2, having verified no RoCE packet after it.
func TestPcapVerifySkipsUnsupportedInterfaces(t *testing.T) {
	status, out, errOut := runCLI("pcap", "verify", mixedCapture)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if status != 0 || errOut != "" || len(lines) != 23 {
		t.Fatalf("status %d, stderr %q, %d lines:\n%s", status, errOut, len(lines), out)
	}
	for i, want := range []string{
		"skipped 8 records of link type 189, which goroce cannot read",
		"skipped 2 records of link type 0, which goroce cannot read",
		"20 ok, 0 bad, 13 other, 10 skipped",
	} {
		if lines[20+i] != want {
			t.Fatalf("line %d %q, want %q", 21+i, lines[20+i], want)
		}
	}
	for _, l := range lines[:20] {
		if !strings.Contains(l, " roce2-ipv4 RC_") || !strings.HasSuffix(l, "ICRC ok") {
			t.Fatalf("packet line %q", l)
		}
	}

	// With another file: the skip lines stay in their file's part and the
	// total counts them.
	other := filepath.Join(filepath.Dir(captures(t)[0]), "rc_pingpong.pcap")
	status, out, errOut = runCLI("pcap", "verify", "-q", mixedCapture, other)
	want := "==> " + mixedCapture + " <==\n" +
		"skipped 8 records of link type 189, which goroce cannot read\n" +
		"skipped 2 records of link type 0, which goroce cannot read\n" +
		"==> " + other + " <==\n" +
		"40 ok, 0 bad, 26 other, 10 skipped\n"
	if status != 0 || errOut != "" || out != want {
		t.Fatalf("status %d, stderr %q, output\n%s\nwant\n%s", status, errOut, out, want)
	}

	// Nothing but records goroce cannot read: read to the end (not 2),
	// but no RoCE packet verified, so not a pass.
	usbOnly := filepath.Join(t.TempDir(), "usb.pcapng")
	if err := os.WriteFile(usbOnly, usbOnlyPcapng(), 0o644); err != nil {
		t.Fatal(err)
	}
	status, out, errOut = runCLI("pcap", "verify", usbOnly)
	if want := "skipped 2 records of link type 189, which goroce cannot read\n0 ok, 0 bad, 0 other, 2 skipped\n"; status != 1 || errOut != "" || out != want {
		t.Fatalf("USB only: status %d, stderr %q, output %q, want %q", status, errOut, out, want)
	}
}

// usbOnlyPcapng is a little-endian pcapng file of one LINKTYPE_USB_LINUX
// interface with two 48-byte usbmon records.
func usbOnlyPcapng() []byte {
	le := binary.LittleEndian
	block := func(typ uint32, body []byte) []byte {
		n := uint32(12 + len(body))
		b := le.AppendUint32(le.AppendUint32(nil, typ), n)
		return le.AppendUint32(append(b, body...), n)
	}
	shb := le.AppendUint64(le.AppendUint16(le.AppendUint16(le.AppendUint32(nil, 0x1A2B3C4D), 1), 0), ^uint64(0))
	idb := le.AppendUint32(le.AppendUint16(le.AppendUint16(nil, 189), 0), 0)
	epb := func(ts uint32) []byte {
		b := le.AppendUint32(le.AppendUint32(le.AppendUint32(le.AppendUint32(le.AppendUint32(nil, 0), 0), ts), 48), 48)
		return block(6, append(b, make([]byte, 48)...))
	}
	return append(append(append(block(0x0A0D0D0A, shb), block(1, idb)...), epb(1)...), epb(2)...)
}
