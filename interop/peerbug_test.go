package interop

import (
	"strings"
	"testing"
)

// The shape of the write_bw_bidir failure of session 16: rxe's second pass
// over PSNs 899672.. starts with a zero-length WRITE ONLY (opcode 10) where
// its first pass had a FIRST (6).
func TestRetransmitMismatch(t *testing.T) {
	row := func(src, qp, psn, op string) string { return strings.Join([]string{src, "", qp, psn, op}, "\t") }
	row6 := func(src, qp, psn, op string) string { return strings.Join([]string{"", src, qp, psn, op}, "\t") }
	good := []string{
		row(GuestIP, "0x000011", "899672", "6"), row(GuestIP, "0x000011", "899673", "7"),
		row(HostIP, "0x000092", "5", "10"),
		row(GuestIP, "0x000011", "899672", "6"), row(GuestIP, "0x000011", "899673", "7"), // a correct resend
	}
	if got := RetransmitMismatch(good, GuestIP, GuestIP6); got != "" {
		t.Fatalf("a faithful retransmission reported: %s", got)
	}
	bad := append(good[:len(good):len(good)], row(GuestIP, "0x000011", "899672", "10"))
	got := RetransmitMismatch(bad, GuestIP, GuestIP6)
	if !strings.Contains(got, "resent PSN 899672 to QP 0x000011 as opcode 10, first sent as opcode 6") {
		t.Fatalf("mismatch not found: %q", got)
	}
	// The same PSN on another QP, or from goroce's side, is not the peer's.
	other := append(good[:len(good):len(good)], row(GuestIP, "0x000012", "899672", "10"), row(HostIP, "0x000092", "5", "6"))
	if got := RetransmitMismatch(other, GuestIP, GuestIP6); got != "" {
		t.Fatalf("unrelated packets reported: %s", got)
	}
	v6 := []string{row6(GuestIP6, "0x11", "7", "0"), row6(GuestIP6, "0x11", "7", "4")}
	if got := RetransmitMismatch(v6, GuestIP, GuestIP6); got == "" {
		t.Fatal("IPv6 mismatch not found")
	}
}
