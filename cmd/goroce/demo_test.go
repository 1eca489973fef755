package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/tsharktest"
)

// goroce demo, the README's first command, end to end: run inside a fresh
// network namespace (its own loopback, so no other user of
// 127.0.0.1:4791 interferes), every operation verified, the capture
// verified by goroce and dissected cleanly by tshark.
func TestDemo(t *testing.T) {
	ns := freshNS(t) // root: the UDP link reads IPv4 through a raw socket
	file := filepath.Join(t.TempDir(), "demo.pcap")
	var st int
	var out, errs string
	if err := ns.Do(func() error {
		st, out, errs = runCLI("demo", "--pcap", file, "-D", "300ms", "-n", "200")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if st != exitOK {
		t.Fatalf("goroce demo exit %d\nstdout:\n%s\nstderr:\n%s", st, out, errs)
	}
	for _, op := range []string{"SEND 4096 B", "SEND_WITH_IMM", "RDMA_WRITE 65536 B", "RDMA_WRITE_WITH_IMM", "RDMA_READ 65536 B", "ATOMIC_FETCH_AND_ADD", "ATOMIC_CMP_AND_SWP"} {
		if !strings.Contains(out, "ok    "+op) {
			t.Errorf("demo output lacks a verified %s:\n%s", op, out)
		}
	}
	if !strings.Contains(out, " 0 bad, 0 other") || !strings.Contains(out, "BW average[MB/sec]") || !strings.Contains(out, "t_typical[usec]") {
		t.Fatalf("demo output:\n%s", out)
	}
	if st, vout, _ := runCLI("pcap", "verify", "-q", file); st != exitOK || !strings.HasSuffix(strings.TrimSpace(vout), "0 bad, 0 other") {
		t.Fatalf("goroce pcap verify: exit %d\n%s", st, lastLine(vout))
	}
	frames := tsharktest.CheckRoCE(t, file)
	t.Logf("tshark: %d frames, all InfiniBand", len(frames))
}
