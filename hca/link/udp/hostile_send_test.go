//go:build linux

package udp

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

// TestWriteOffsetOutside: an offset outside a buffer is API misuse, which
// Write refuses with ErrBadFrame naming it (as the tun and afpacket links
// do) after sending the frames before it, instead of panicking on the
// slice.
func TestWriteOffsetOutside(t *testing.T) {
	ns := newNetNS(t)
	a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", nil)
	defer a.Close()
	defer b.Close()
	good := mustFrames(t, a, b, 0, 1, 64)[0]
	short := good[:10]
	for _, tc := range []struct {
		name   string
		bufs   [][]byte
		offset int
		want   int
	}{
		{"negative", [][]byte{good, good}, -1, 0},
		{"past-every-buffer", [][]byte{good, good}, len(good) + 1, 0},
		{"past-the-second", [][]byte{append(make([]byte, 20), good...), short}, 20, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.Stats()
			n, err := a.Write(tc.bufs, tc.offset)
			if n != tc.want || !errors.Is(err, ErrBadFrame) {
				t.Fatalf("Write = %d, %v; want %d, ErrBadFrame", n, err, tc.want)
			}
			st := a.Stats()
			if st.TxRejected != before.TxRejected+1 || st.TxFrames != before.TxFrames+uint64(tc.want) {
				t.Fatalf("stats %+v, before %+v: want one rejection, %d frames sent", st, before, tc.want)
			}
		})
	}
	readFrames(t, b, 1, nil) // the frame before the bad one went out
}

// TestWritePortZero: a run of frames to UDP port 0 is refused as a bad
// frame. The kernel would refuse it with EINVAL, which Write took for
// UDP_SEGMENT refused on the path: GSO went off for every destination
// (or, through a connected socket, the frames went out to port 0).
func TestWritePortZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		v6   bool
		mod  func(*Config)
	}{
		{"ipv4", false, func(c *Config) { c.NoConnect = true }},
		{"ipv4-connected", false, nil},
		{"ipv6", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetNS(t, "fd00::1/128", "fd00::2/128")
			sa, da, dport := "127.0.0.1", "127.0.0.2", ipv4Hdr+2
			if tc.v6 {
				sa, da, dport = "fd00::1", "fd00::2", ipv6Hdr+2
			}
			a, b := openPair(t, ns, sa, da, tc.mod)
			defer a.Close()
			defer b.Close()
			if !a.GSO() {
				t.Skip("kernel has no UDP_SEGMENT")
			}
			fs := mustFrames(t, a, b, 0, 9, 1000)
			for _, f := range fs[1:] {
				f[dport], f[dport+1] = 0, 0
			}
			if n, err := a.Write(fs, 0); n != 1 || !errors.Is(err, ErrBadFrame) {
				t.Fatalf("Write of a frame and 8 to port 0 = %d, %v; want 1, ErrBadFrame", n, err)
			}
			if st := a.Stats(); !a.GSO() || st.GSODisabled != 0 || st.TxErrors != 0 || st.TxRejected != 1 {
				t.Fatalf("GSO %v, stats %+v: want GSO on, one frame rejected, no kernel error", a.GSO(), st)
			}
			readFrames(t, b, 1, nil)
		})
	}
}

// TestGSORefusedFallback: when the kernel refuses a GSO super-datagram
// (here EINVAL, for a socket that sends without UDP checksums), Write
// turns GSO off for its destination and resends: every frame arrives
// once, in order, and later Writes there go without GSO and without
// another refused attempt (one destination counted); the link keeps GSO
// for other destinations (TestGSORefusedPerDestination, and
// TestGSORefusedEverywhere for a refusal that is the socket's).
func TestGSORefusedFallback(t *testing.T) {
	for _, tc := range []struct {
		name string
		v6   bool
		mod  func(*Config)
	}{
		{"ipv4", false, func(c *Config) { c.NoConnect = true }},
		{"plain", false, func(c *Config) { c.PlainIPv4 = true }},
		{"ipv6", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetNS(t, "fd00::1/128", "fd00::2/128")
			sa, da := "127.0.0.1", "127.0.0.2"
			level, opt := unix.SOL_SOCKET, unix.SO_NO_CHECK
			if tc.v6 {
				sa, da = "fd00::1", "fd00::2"
				level, opt = unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX
			}
			a, b := openPair(t, ns, sa, da, tc.mod)
			defer a.Close()
			defer b.Close()
			if !a.GSO() {
				t.Skip("kernel has no UDP_SEGMENT")
			}
			var err error
			if cerr := a.udpRC.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), level, opt, 1) }); cerr != nil {
				t.Fatal(cerr)
			}
			if err != nil {
				t.Fatal(err)
			}
			// A datagram, then a run that would go as one super-datagram.
			fs := append(mustFrames(t, a, b, 0, 1, 64), mustFrames(t, a, b, 1, 20, 1000)...)
			if w, err := a.Write(fs, 0); w != len(fs) || err != nil {
				t.Fatalf("Write = %d, %v; want %d", w, err, len(fs))
			}
			if w, err := a.Write(mustFrames(t, a, b, 21, 10, 1000), 0); w != 10 || err != nil {
				t.Fatalf("second Write = %d, %v; want 10", w, err)
			}
			readFrames(t, b, 31, func(got int, p *wire.Packet) {
				if int(p.BTH().PSN()) != got {
					t.Fatalf("frame %d has PSN %d", got, p.BTH().PSN())
				}
			})
			st := a.Stats()
			if !a.GSO() || st.GSODisabled != 0 || st.GSORefused != 1 || st.TxGSOBatches != 0 || st.TxFrames != 31 || st.TxErrors != 0 {
				t.Fatalf("GSO %v, stats %+v: want GSO turned off for the one destination only, 31 frames sent unsegmented", a.GSO(), st)
			}
		})
	}
}

// TestPathMTUTooSmall: a frame within the link MTU but over its route's
// MTU (a local route of 1200 bytes) is refused by the kernel (DF is set):
// Write returns EMSGSIZE after the frames before it, counts the error, and
// frames that fit still go.
func TestPathMTUTooSmall(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"unconnected", func(c *Config) { c.NoConnect = true; c.NoGSO = true }},
		{"unconnected-gso", func(c *Config) { c.NoConnect = true }},
		{"connected", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetNS(t)
			ns.do(t, func() {
				lo, err := netlink.LinkByName("lo")
				if err != nil {
					t.Fatal(err)
				}
				if err := netlink.RouteReplace(&netlink.Route{
					LinkIndex: lo.Attrs().Index, Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST,
					Dst: &net.IPNet{IP: net.IPv4(127, 0, 0, 3).To4(), Mask: net.CIDRMask(32, 32)}, MTU: 1200,
				}); err != nil {
					t.Fatal(err)
				}
			})
			a, b := openPair(t, ns, "127.0.0.1", "127.0.0.3", tc.mod)
			defer a.Close()
			defer b.Close()
			fs := append(mustFrames(t, a, b, 0, 1, 64), mustFrames(t, a, b, 1, 4, 1400)...)
			if w, err := a.Write(fs, 0); w != 1 || !errors.Is(err, unix.EMSGSIZE) {
				t.Fatalf("Write of a small frame and 4 over the path MTU = %d, %v; want 1, EMSGSIZE", w, err)
			}
			if st := a.Stats(); st.TxErrors == 0 || st.TxFrames != 1 {
				t.Fatalf("stats %+v: want the refusal counted, one frame sent", st)
			}
			if w, err := a.Write(mustFrames(t, a, b, 1, 4, 1000), 0); w != 4 || err != nil {
				t.Fatalf("Write of 4 frames that fit = %d, %v", w, err)
			}
			readFrames(t, b, 5, func(got int, p *wire.Packet) {
				if int(p.BTH().PSN()) != got {
					t.Fatalf("frame %d has PSN %d", got, p.BTH().PSN())
				}
			})
		})
	}
}

// TestWriteRejectNamesFrame: a Write longer than the batch size goes in
// batches; the error for a frame it refuses names that frame's index in
// the Write, not in its batch.
func TestWriteRejectNamesFrame(t *testing.T) {
	ns := newNetNS(t)
	a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", func(c *Config) { c.BatchSize = 4 })
	defer a.Close()
	defer b.Close()
	fs := mustFrames(t, a, b, 0, 8, 64)
	fs[6] = fs[6][:20]
	n, err := a.Write(fs, 0)
	if n != 6 || !errors.Is(err, ErrBadFrame) || !strings.Contains(err.Error(), "frame 6:") {
		t.Fatalf("Write = %d, %v; want 6 and ErrBadFrame naming frame 6", n, err)
	}
	readFrames(t, b, 6, nil)
}
