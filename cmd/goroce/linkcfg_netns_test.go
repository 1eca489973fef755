package main

import (
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/hca/link/pcap"
	"github.com/goroce/goroce/hca/link/tun"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/internal/tsharktest"
)

// checkCapture verifies a goroce capture with pcap.Verify (every ICRC) and
// Wireshark (every frame clean InfiniBand) and returns the RoCE packets.
func checkCapture(t *testing.T, name string) int {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := pcap.Verify(f, io.Discard, pcap.VerifyOptions{Quiet: true})
	f.Close()
	if err != nil || counts.Bad != 0 || counts.OK == 0 {
		t.Fatalf("pcap.Verify %s: %+v, %v", name, counts, err)
	}
	if n := len(tsharktest.CheckRoCE(t, name)); n != counts.OK {
		t.Fatalf("tshark sees %d frames, pcap.Verify %d RoCE packets", n, counts.OK)
	}
	return counts.OK
}

// ipIn runs ip(8) inside ns.
func ipIn(t *testing.T, ns *netcfg.NetNS, args ...string) {
	t.Helper()
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("ip (iproute2) not installed")
	}
	err = ns.Do(func() error {
		out, err := exec.Command(ip, args...).CombinedOutput()
		if err != nil {
			t.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// TestPingpongTunUDP: the server's HCA sits behind a TUN or TAP device
// goroce creates (--addr 10.99.1.2/24, --kernel-addr 10.99.1.1/24), the
// client is a udp link on the kernel's address in the same namespace; the
// kernel carries RoCEv2 between the device and the socket (hca/link/tun's
// "TUN to the UDP link" topology; on the TAP the kernel is the HCA's next
// hop and reaches the HCA through the static neighbour entry tun.Open
// adds). The TCP exchange goes to the kernel's address: the goroce host has
// no TCP, and the server listens on all.
func TestPingpongTunUDP(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	for _, tc := range []struct{ link, size string }{{"tun", "4096"}, {"tun", "16384"}, {"tap", "4096"}} {
		size := tc.size
		t.Run(tc.link+"/s"+size, func(t *testing.T) {
			ns, err := netcfg.NewNetNS("")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ns.Close() })
			if err := netcfg.SetUp(ns, "lo"); err != nil {
				t.Fatal(err)
			}
			capName := filepath.Join(t.TempDir(), "tun.pcap")
			port := "18515"
			flags := []string{"-p", port, "-n", "50", "-s", size}
			srv := startCmdIn(t, ns, append([]string{"pingpong", "--link", tc.link, "--dev", "gtun0",
				"--addr", "10.99.1.2/24", "--kernel-addr", "10.99.1.1/24", "--pcap", capName}, flags...)...)
			srv.waitOutput(t, "local address")
			cli := startCmdIn(t, ns, append(append([]string{"pingpong", "--link", "udp", "--addr", "10.99.1.1"}, flags...), "10.99.1.1")...)
			cli.wait(t, 60*time.Second)
			srv.wait(t, 60*time.Second)
			n := atoi(t, size)
			checkPingpongOutput(t, "server", srv, 1, false, n, 50, "10.99.1.2", "10.99.1.1")
			checkPingpongOutput(t, "client", cli, 1, false, n, 50, "10.99.1.1", "10.99.1.2")
			t.Logf("%d RoCE packets on the %s", checkCapture(t, capName), tc.link)
			// goroce created the device: it is gone with the server.
			if err := ns.Do(func() error { _, err := netcfg.LinkByName("gtun0"); return err }); err == nil {
				t.Error("gtun0 still exists after the server ended")
			}
		})
	}
}

// TestPingpongTapAFPacket: the client's HCA sits behind a persistent TAP
// (made with ip tuntap, as the interop harness does) on a bridge in host A
// that also holds A's veth end; the server is an afpacket link in host B.
// Frames are bridged unchanged, so RoCEv1 works as well as RoCEv2. goroce
// answers no ARP: B gets a static neighbour entry for the TAP host, and the
// TAP host resolves B through A's kernel (the bridge's neighbour table).
func TestPingpongTapAFPacket(t *testing.T) {
	for _, encap := range []string{"roce1", "roce2"} {
		t.Run(encap, func(t *testing.T) {
			h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
			tapHost := netip.MustParseAddr("10.99.0.3")
			// Host A: bridge gbr0 with veth-a and the TAP; A's address
			// moves from veth-a to the bridge.
			ipIn(t, h.A.NS, "link", "add", "gbr0", "type", "bridge")
			ipIn(t, h.A.NS, "tuntap", "add", "dev", "gtap0", "mode", "tap")
			ipIn(t, h.A.NS, "addr", "del", h.A.Prefix.String(), "dev", "veth-a")
			ipIn(t, h.A.NS, "link", "set", "veth-a", "master", "gbr0")
			ipIn(t, h.A.NS, "link", "set", "gtap0", "master", "gbr0", "up")
			ipIn(t, h.A.NS, "link", "set", "gbr0", "up")
			ipIn(t, h.A.NS, "addr", "add", h.A.Prefix.String(), "dev", "gbr0")
			if err := netcfg.AddNeighbour(h.B.NS, h.B.Ifname, tapHost, tun.DefaultHardwareAddr(tapHost)); err != nil {
				t.Fatal(err)
			}
			capName := filepath.Join(t.TempDir(), "tap.pcap")
			flags := []string{"-p", "18515", "-n", "50", "--encap", encap}
			srv := startCmdIn(t, h.B.NS, append([]string{"pingpong", "--link", "afpacket", "--dev", h.B.Ifname}, flags...)...)
			srv.waitOutput(t, "local address")
			cli := startCmdIn(t, h.A.NS, append(append([]string{"pingpong", "--link", "tap", "--dev", "gtap0",
				"--addr", tapHost.String(), "--pcap", capName}, flags...), h.B.Addr.String())...)
			cli.wait(t, 60*time.Second)
			srv.wait(t, 60*time.Second)
			checkPingpongOutput(t, "server", srv, 1, false, 4096, 50, h.B.Addr.String(), tapHost.String())
			checkPingpongOutput(t, "client", cli, 1, false, 4096, 50, tapHost.String(), h.B.Addr.String())
			frames := tsharktest.Dissect(t, capName)
			t.Logf("%d RoCE packets on the TAP", checkCapture(t, capName))
			wantV1 := encap == "roce1"
			for _, f := range frames {
				if v1 := !strings.Contains(f.Protocols, ":udp:"); v1 != wantV1 {
					t.Fatalf("frame %d: protocols %q, want %s", f.Number, f.Protocols, encap)
				}
			}
			// Attached, not created: the device outlives goroce.
			if err := h.A.NS.Do(func() error { _, err := netcfg.LinkByName("gtap0"); return err }); err != nil {
				t.Errorf("the persistent TAP went away: %v", err)
			}
		})
	}
}

// TestPingpongAFPacketUDPGSO: 4096-byte messages at path MTU 1024 leave the
// udp link as UDP GSO super-datagrams, which the veth hands to the peer's
// packet socket whole; afpacket splits them (PACKET_VNET_HDR).
func TestPingpongAFPacketUDPGSO(t *testing.T) {
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	capName := filepath.Join(t.TempDir(), "srv.pcap")
	srv, cli := nsPingpong(t, h, []string{"--link", "afpacket", "--dev", "veth-b", "--pcap", capName},
		[]string{"--link", "udp", "--addr", "10.99.0.1"}, []string{"-n", "50", "-s", "4096"}, 60*time.Second)
	checkPingpongOutput(t, "server", srv, 1, false, 4096, 50, "10.99.0.2", "10.99.0.1")
	checkPingpongOutput(t, "client", cli, 1, false, 4096, 50, "10.99.0.1", "10.99.0.2")
	// Each way 50 messages of 4 packets plus ACKs: the server's link saw
	// at least 400 data packets, so the GSO runs were split, not dropped.
	if n := checkCapture(t, capName); n < 400 {
		t.Fatalf("%d RoCE packets on the server's link, want at least 400", n)
	}
}
