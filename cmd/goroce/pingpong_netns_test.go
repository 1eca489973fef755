package main

import (
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/hca/link/pcap"
	"github.com/goroce/goroce/hca/netcfg"
)

// startCmdIn runs a command inside ns (its sockets are created there; the
// HCA's goroutines keep using them from any thread).
func startCmdIn(t *testing.T, ns *netcfg.NetNS, args ...string) *cmdRun {
	t.Helper()
	c := &cmdRun{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if err := ns.Do(func() error {
			c.status = run(args, &c.stdout, &c.stderr)
			return nil
		}); err != nil {
			c.status = -1
			c.stderr.Write([]byte(err.Error() + "\n"))
		}
	}()
	return c
}

// nsPingpong runs a server in host B and a client in host A.
func nsPingpong(t *testing.T, h *netcfg.Hosts, srvLink, cliLink, flags []string, timeout time.Duration) (srv, cli *cmdRun) {
	t.Helper()
	port := "18515"
	srv = startCmdIn(t, h.B.NS, append(append([]string{"pingpong", "-p", port}, srvLink...), flags...)...)
	srv.waitOutput(t, "local address")
	cargs := append(append([]string{"pingpong", "-p", port}, cliLink...), flags...)
	cli = startCmdIn(t, h.A.NS, append(cargs, h.B.Addr.String())...)
	cli.wait(t, timeout)
	srv.wait(t, timeout)
	return srv, cli
}

func verifyCapture(t *testing.T, name string) pcap.Counts {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := pcap.Verify(f, io.Discard, pcap.VerifyOptions{Quiet: true})
	f.Close()
	if err != nil || counts.Bad != 0 || counts.OK == 0 {
		t.Fatalf("pcap.Verify %s: %v, %v", name, counts, err)
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Logf("tshark not installed: Wireshark check skipped")
		return counts
	}
	// Wireshark's RPC-over-RDMA heuristic misreads small SEND payloads
	// (wire-spec §13, which calls it "rpcordma": tshark 4.0 names it rpcrdma_infiniband); with it off, nothing may be malformed.
	out, err := exec.Command(tshark, "-r", name, "--disable-heuristic", "rpcrdma_infiniband", "-Y", "_ws.malformed || _ws.expert.severity >= 0x00800000").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Fatalf("tshark flags frames of %s:\n%s", name, s)
	}
	n, err := exec.Command(tshark, "-r", name, "-Y", "infiniband").Output()
	if err != nil || strings.Count(string(n), "\n") != counts.OK {
		t.Fatalf("tshark dissects %d InfiniBand frames, pcap.Verify saw %d (%v)", strings.Count(string(n), "\n"), counts.OK, err)
	}
	return counts
}

// TestPingpongNetns runs pingpong between two network namespaces over the
// afpacket link (RoCEv2 and RoCEv1) and between afpacket and the udp link.
func TestPingpongNetns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		srv, cli []string
		flags    []string
		nqp      int
	}{
		{"afpacket-roce2", []string{"--link", "afpacket", "--dev", "veth-b"}, []string{"--link", "afpacket", "--dev", "veth-a"}, nil, 1},
		{"afpacket-roce1", []string{"--link", "afpacket", "--dev", "veth-b", "--encap", "roce1"}, []string{"--link", "afpacket", "--dev", "veth-a", "--encap", "roce1"}, nil, 1},
		{"afpacket-uc", []string{"--link", "afpacket", "--dev", "veth-b"}, []string{"--link", "afpacket", "--dev", "veth-a"}, []string{"--qp", "uc"}, 1},
		// afpacket splits the udp link's UDP GSO super-datagrams, which a
		// veth hands to a packet socket whole (TestPingpongAFPacketUDPGSO).
		{"afpacket-udp", []string{"--link", "afpacket", "--dev", "veth-b"}, []string{"--link", "udp", "--addr", "10.99.0.1"}, nil, 1},
		{"udp-rc", []string{"--link", "udp", "--addr", "10.99.0.2"}, []string{"--link", "udp", "--addr", "10.99.0.1"}, nil, 1},
		{"udp-uc", []string{"--link", "udp", "--addr", "10.99.0.2"}, []string{"--link", "udp", "--addr", "10.99.0.1"}, []string{"--qp", "uc"}, 1},
		{"udp-ud", []string{"--link", "udp", "--addr", "10.99.0.2"}, []string{"--link", "udp", "--addr", "10.99.0.1"}, []string{"--qp", "ud", "-s", "1024"}, 1},
		{"udp-srq", []string{"--link", "udp", "--addr", "10.99.0.2"}, []string{"--link", "udp", "--addr", "10.99.0.1"}, []string{"--srq", "3"}, 3},
		{"afpacket-ud", []string{"--link", "afpacket", "--dev", "veth-b"}, []string{"--link", "afpacket", "--dev", "veth-a"}, []string{"--qp", "ud", "-s", "1024"}, 1},
		{"afpacket-srq", []string{"--link", "afpacket", "--dev", "veth-b"}, []string{"--link", "afpacket", "--dev", "veth-a"}, []string{"--srq", "3", "-e"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
			capName := filepath.Join(t.TempDir(), "srv.pcap")
			if d := os.Getenv("PPDBG"); d != "" {
				capName = d
			}
			flags := append([]string{"-n", "50"}, tc.flags...)
			srv, cli := nsPingpong(t, h, append(tc.srv, "--pcap", capName), tc.cli, flags, 60*time.Second)
			size, ud := 4096, false
			for i, f := range flags {
				if f == "-s" {
					size = atoi(t, flags[i+1])
				}
				if f == "ud" {
					ud = true
				}
			}
			checkPingpongOutput(t, "server", srv, tc.nqp, ud, size, 50, "10.99.0.2", "10.99.0.1")
			checkPingpongOutput(t, "client", cli, tc.nqp, ud, size, 50, "10.99.0.1", "10.99.0.2")
			verifyCapture(t, capName)
		})
	}
}

// TestPingpongNetnsLoss: RC through 2% random loss (nftables, both
// directions) for 10,000 iterations; every message's data is checked.
func TestPingpongNetnsLoss(t *testing.T) {
	iters := 10000
	if testing.Short() {
		iters = 1000
	}
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{Loss: 2})
	capName := filepath.Join(t.TempDir(), "cli.pcap")
	flags := []string{"-n", strconv.Itoa(iters), "-s", "64"}
	srv, cli := nsPingpong(t, h, []string{"--link", "afpacket", "--dev", "veth-b"},
		[]string{"--link", "afpacket", "--dev", "veth-a", "--pcap", capName}, flags, 5*time.Minute)
	checkPingpongOutput(t, "server", srv, 1, false, 64, iters, "10.99.0.2", "10.99.0.1")
	checkPingpongOutput(t, "client", cli, 1, false, 64, iters, "10.99.0.1", "10.99.0.2")
	// Without loss the client's link carries exactly 4 packets per
	// iteration (SEND and ACK each way); retransmissions add more, and
	// dropped frames (lost after the client's tap, or before it) shift the
	// count both ways, so demand clear evidence of recovery.
	c := verifyCapture(t, capName)
	if c.OK == 4*iters {
		t.Fatalf("%d packets for %d iterations: no retransmission, so no loss happened", c.OK, iters)
	}
	t.Logf("%d RoCE packets on the client's link for %d iterations", c.OK, iters)
}

// TestPingpongNetnsTUN: two namespaces joined by veth; host A's goroce sits
// behind a TUN it creates (10.99.1.2, with the kernel's 10.99.1.1 on the
// device) and A's kernel forwards between the veth and the TUN; host B is a
// udp link on its veth address with a route to 10.99.1.0/24 through A. The
// TCP exchange runs between the two kernels; RoCEv2 between B's socket and
// the TUN. RC, UC, UD and SRQ.
func TestPingpongNetnsTUN(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		nqp   int
	}{
		{"rc", nil, 1},
		{"uc", []string{"--qp", "uc"}, 1},
		{"ud", []string{"--qp", "ud", "-s", "1024"}, 1},
		{"srq", []string{"--srq", "3"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
			if err := netcfg.SetSysctl(h.A.NS, "net/ipv4/ip_forward", "1"); err != nil {
				t.Fatal(err)
			}
			tunNet := netip.MustParsePrefix("10.99.1.0/24")
			if err := netcfg.AddRoute(h.B.NS, tunNet, h.A.Addr, h.B.Ifname); err != nil {
				t.Fatal(err)
			}
			capName := filepath.Join(t.TempDir(), "tun.pcap")
			flags := append([]string{"-n", "50"}, tc.flags...)
			port := "18515"
			srv := startCmdIn(t, h.B.NS, append([]string{"pingpong", "-p", port, "--link", "udp", "--addr", h.B.Addr.String()}, flags...)...)
			srv.waitOutput(t, "local address")
			cli := startCmdIn(t, h.A.NS, append(append([]string{"pingpong", "-p", port, "--link", "tun", "--dev", "gtun0",
				"--addr", "10.99.1.2/24", "--kernel-addr", "10.99.1.1/24", "--pcap", capName}, flags...), h.B.Addr.String())...)
			cli.wait(t, 60*time.Second)
			srv.wait(t, 60*time.Second)
			size, ud := 4096, tc.name == "ud"
			if ud {
				size = 1024
			}
			checkPingpongOutput(t, "server", srv, tc.nqp, ud, size, 50, h.B.Addr.String(), "10.99.1.2")
			checkPingpongOutput(t, "client", cli, tc.nqp, ud, size, 50, "10.99.1.2", h.B.Addr.String())
			verifyCapture(t, capName)
		})
	}
}
