package main

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/hca/netcfg"
)

// goroce bench over the udp link on IPv6, server and client in one fresh
// namespace on two addresses of lo: the receive path then takes UDP GRO
// (a 64 KiB WRITE's GSO run arrives in one receive and is split), and the
// server's capture of what it received and sent verifies.
func TestBenchIPv6UDP(t *testing.T) {
	ns := freshNS(t)
	for _, a := range []string{"fd00::1/128", "fd00::2/128"} {
		if err := netcfg.AddAddr(ns, "lo", netip.MustParsePrefix(a)); err != nil {
			t.Fatal(err)
		}
	}
	capName := filepath.Join(t.TempDir(), "v6.pcap")
	port := freeTCPPort(t)
	flags := []string{"write_bw", "-p", port, "-s", "65536", "-n", "500"}
	srv := startCmdIn(t, ns, append(append([]string{"bench"}, flags...), "--addr", "fd00::1", "--pcap", capName)...)
	srv.waitOutput(t, "Waiting for client")
	cli := startCmdIn(t, ns, append(append([]string{"bench"}, flags...), "--addr", "fd00::2", "fd00::1")...)
	cli.wait(t, 60*time.Second)
	srv.wait(t, 60*time.Second)
	for _, c := range []struct {
		who string
		r   *cmdRun
	}{{"server", srv}, {"client", cli}} {
		if c.r.status != exitOK {
			t.Fatalf("%s: status %d\nstdout:\n%s\nstderr:\n%s", c.who, c.r.status, c.r.stdout.String(), c.r.stderr.String())
		}
		if !strings.Contains(c.r.stdout.String(), " 65536      500 ") {
			t.Errorf("%s: no result line for 500 messages of 64 KiB:\n%s", c.who, c.r.stdout.String())
		}
	}
	// 500 WRITEs of 16 packets each, and the ACKs.
	if n := checkCapture(t, capName); n < 500*16 {
		t.Fatalf("%d RoCE packets in the server's capture, want at least %d", n, 500*16)
	}
}
