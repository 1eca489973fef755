package afpacket

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bench"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/wire"
)

// udpToPacket opens a udp link on host A's address and a packet socket on
// veth-b: the udp link's GSO super-datagrams cross the veth whole.
func udpToPacket(t *testing.T, opts netcfg.TwoHostsOptions, v6, noGSO bool) (*udp.Endpoint, *Endpoint, *netcfg.Hosts) {
	t.Helper()
	return udpToPacketCfg(t, opts, v6, noGSO, Config{})
}

// udpToPacketCfg is udpToPacket with cfg for the packet socket.
func udpToPacketCfg(t *testing.T, opts netcfg.TwoHostsOptions, v6, noGSO bool, cfg Config) (*udp.Endpoint, *Endpoint, *netcfg.Hosts) {
	t.Helper()
	h := netcfg.TwoHosts(t, opts)
	src := h.A.Addr
	if v6 {
		src = h.A.Addr6
	}
	var u *udp.Endpoint
	h.A.Do(t, func() (err error) {
		u, err = udp.Open(udp.Config{Addr: src, NoGSO: noGSO})
		return err
	})
	t.Cleanup(func() { u.Close() })
	if !noGSO && !u.GSO() {
		t.Skip("kernel has no UDP_SEGMENT")
	}
	cfg.Interface, cfg.NetNS = h.B.Ifname, h.B.NS
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return u, b, h
}

// TestGSOSplit sends runs of equal-size RoCE packets from the udp link
// (one UDP GSO super-datagram each) to a packet socket across a veth and
// checks each arrives as the packet the kernel's segmentation would have
// put on a wire: Ethernet + IP + UDP + the original BTH..ICRC, IPv4 ID
// i for segment i with a valid header checksum, the UDP length and a valid
// UDP checksum, ICRC verified by wire.Decode. On the receive ring each
// super-datagram, larger than a slot, is read whole with one recvmsg
// (TP_STATUS_COPY); without the ring (noring) with recvmmsg.
func TestGSOSplit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v6     bool
		noGSO  bool
		mtu    int
		pay    int
		noRing bool
	}{
		{"ipv4-1024", false, false, 1500, 1024, false},
		{"ipv4-4096", false, false, 9000, 4096, false},
		{"ipv6-1024", true, false, 1500, 1024, false},
		{"ipv4-nogso", false, true, 1500, 1024, false},
		{"ipv4-1024-noring", false, false, 1500, 1024, true},
		{"ipv6-1024-noring", true, false, 1500, 1024, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, b, h := udpToPacketCfg(t, netcfg.TwoHostsOptions{MTU: tc.mtu, IPv6: tc.v6}, tc.v6, tc.noGSO, Config{NoRing: tc.noRing})
			if !tc.noRing {
				needRing(t, b)
			}
			dst := h.B.Addr
			if tc.v6 {
				dst = h.B.Addr6
			}
			peer := &ipPeer{addr: dst}
			// A run of 40 packets, then two that are not part of it (PSN
			// gaps): single datagrams that arrive behind the super-datagram,
			// often in the same receive batch, and must stay behind its
			// segments.
			const run, n = 40, 42
			frames := make([][]byte, n)
			for i := range frames {
				size, psn := tc.pay, 500+i
				if i == run-1 {
					size = 100 // a shorter last packet ends the run
				}
				if i >= run {
					size, psn = 64+i, 1000+10*i
				}
				f, err := linktest.Frame(u, peer, bth.PSN(psn), size)
				if err != nil {
					t.Fatal(err)
				}
				frames[i] = f
			}
			if w, err := u.Write(frames, 0); w != n || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			// A super-datagram holds at most 64 segments and 64 KiB.
			per := min(64, (65535-28)/(len(frames[0])-28))
			// 16 buffers, fewer than n: segments span Reads.
			var base uint16
			readFrames(t, b, n, 16, tc.mtu+ethHdr, func(got int, f []byte) {
				s := got % per // segment number in its super-datagram
				if tc.noGSO || got >= run {
					s = 0
				}
				if s == 0 && !tc.v6 {
					// A datagram's first packet carries the sending
					// socket's ID: 0 unconnected, a counter connected
					// (the udp link's conn.go); segments follow on.
					base = wire.IPv4(f[ethHdr:]).ID()
				}
				wantID := base + uint16(s)
				checkSegment(t, got, f, frames[got], tc.v6, wantID)
				var p wire.Packet
				if err := p.Decode(f, wire.FramingEthernet); err != nil {
					t.Fatalf("frame %d: %v", got, err)
				}
			})
			us, bs := u.Stats(), b.Stats()
			wantGSO := uint64((run + per - 1) / per)
			if tc.noGSO {
				wantGSO = 0
			}
			if us.TxGSOBatches != wantGSO || bs.RxGSO != wantGSO {
				t.Errorf("sender %d GSO batches, receiver split %d; want %d", us.TxGSOBatches, bs.RxGSO, wantGSO)
			}
			if !tc.noGSO && bs.RxGSOSegments != run {
				t.Errorf("receiver delivered %d GSO segments, want %d", bs.RxGSOSegments, run)
			}
			if bs.RxFrames != n || bs.RxTooLarge+bs.RxMalformed+bs.RxRunt != 0 {
				t.Errorf("receiver stats %+v", bs)
			}
			// One slot per datagram; a copy and one system call per
			// super-datagram.
			slots := wantGSO + n - run
			if tc.noGSO {
				slots = n
			}
			if !tc.noRing && (bs.RxCopies != wantGSO || bs.RxSyscalls != wantGSO || bs.RxRingFrames != slots) {
				t.Errorf("ring: %d slots, %d copies, %d receive system calls; want %d, %d, %d",
					bs.RxRingFrames, bs.RxCopies, bs.RxSyscalls, slots, wantGSO, wantGSO)
			}
		})
	}
}

// checkSegment compares received Ethernet frame got with the IP frame the
// udp link was given.
func checkSegment(t *testing.T, i int, got, want []byte, v6 bool, wantID uint16) {
	t.Helper()
	if len(got) != ethHdr+len(want) {
		t.Fatalf("frame %d: %d bytes, want %d + Ethernet header", i, len(got), len(want))
	}
	ipf := got[ethHdr:]
	var src, dst netip.Addr
	var u wire.UDP
	if v6 {
		ip := wire.IPv6(ipf)
		src, dst, u = ip.Src(), ip.Dst(), wire.UDP(ipf[40:])
		if int(binary.BigEndian.Uint16(ipf[4:])) != len(ipf)-40 {
			t.Fatalf("frame %d: IPv6 payload length %d for %d bytes", i, binary.BigEndian.Uint16(ipf[4:]), len(ipf))
		}
	} else {
		ip := wire.IPv4(ipf)
		src, dst, u = ip.Src(), ip.Dst(), wire.UDP(ipf[20:])
		if ip.ID() != wantID || !ip.IsChecksumValid() || int(binary.BigEndian.Uint16(ipf[2:])) != len(ipf) {
			t.Fatalf("frame %d: IPv4 ID %d (want %d), checksum valid %v, total length %d for %d bytes",
				i, ip.ID(), wantID, ip.IsChecksumValid(), binary.BigEndian.Uint16(ipf[2:]), len(ipf))
		}
	}
	if u.Length() != len(u) {
		t.Fatalf("frame %d: UDP length %d for %d bytes", i, u.Length(), len(u))
	}
	if u.Checksum() == 0 || !u.IsChecksumValid(src, dst) {
		t.Fatalf("frame %d: UDP checksum %#04x does not verify", i, u.Checksum())
	}
	// BTH through the payload is the sender's (the ICRC may differ: the
	// udp link recomputed it for the segment's IP ID).
	off := len(want) - len(u) + 8
	if !bytes.Equal(ipf[off:len(ipf)-4], want[off:len(want)-4]) {
		t.Fatalf("frame %d: BTH or payload differs", i)
	}
	if !linktest.Equivalent(ipf, want, link.FormatIP) {
		t.Fatalf("frame %d is not the packet sent", i)
	}
}

type ipPeer struct {
	link.Endpoint
	addr netip.Addr
}

func (p *ipPeer) Addrs() []netip.Addr { return []netip.Addr{p.addr} }
func (p *ipPeer) Format() link.Format { return link.FormatIP }

// TestHCAUDPToPacket runs RC traffic between an HCA on the udp link (host
// A) and one on a packet socket (host B): RunChecks (every RC operation
// with data checks, 64 KiB messages included) and a 64 KiB RDMA WRITE
// bandwidth run at path MTU 1024 and 4096, with the udp link sending GSO
// super-datagrams, and with GSO off as the control.
func TestHCAUDPToPacket(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pmtu  bth.MTU
		noGSO bool
	}{
		{"pmtu1024", bth.MTU1024, false},
		{"pmtu4096", bth.MTU4096, false},
		{"pmtu1024-nogso", bth.MTU1024, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, b, h := udpToPacket(t, netcfg.TwoHostsOptions{MTU: 9000}, false, tc.noGSO)
			da, err := hca.Open(u, hca.Options{Name: "udp-a"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { da.Close() })
			db, err := hca.Open(b, hca.Options{Name: "afp-b",
				Resolver: netcfg.NewResolver(netcfg.ResolverConfig{NetNS: h.B.NS, Interface: h.B.Ifname})})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			checkRC(t, da, db, tc.pmtu)
			us, bs := u.Stats(), b.Stats()
			t.Logf("udp link: %d frames, %d GSO batches (%d segments); packet socket: %d frames, %d GSO frames split into %d",
				us.TxFrames, us.TxGSOBatches, us.TxGSOSegments, bs.RxFrames, bs.RxGSO, bs.RxGSOSegments)
			if tc.noGSO {
				if us.TxGSOBatches != 0 || bs.RxGSO != 0 {
					t.Errorf("control run used GSO: %d batches sent, %d split", us.TxGSOBatches, bs.RxGSO)
				}
			} else if us.TxGSOBatches == 0 || bs.RxGSO != us.TxGSOBatches || bs.RxGSOSegments != us.TxGSOSegments {
				t.Errorf("sent %d GSO batches of %d segments, split %d into %d", us.TxGSOBatches, us.TxGSOSegments, bs.RxGSO, bs.RxGSOSegments)
			}
			if bs.RxTooLarge+bs.RxMalformed+bs.RxRunt != 0 {
				t.Errorf("packet socket drops: %+v", bs)
			}
		})
	}
}

// TestGSOZeroAllocs checks that splitting GSO frames allocates nothing per
// batch once the first Read has set up the overflow buffers.
func TestGSOZeroAllocs(t *testing.T) {
	u, b, h := udpToPacket(t, netcfg.TwoHostsOptions{}, false, false)
	peer := &ipPeer{addr: h.B.Addr}
	frames := make([][]byte, 32)
	for i := range frames {
		f, err := linktest.Frame(u, peer, bth.PSN(i), 1024)
		if err != nil {
			t.Fatal(err)
		}
		frames[i] = f
	}
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	wd := linktest.NewWatchdog(linktest.Timeout, b)
	defer wd.Stop()
	cycle := func() {
		if _, err := u.Write(frames, 0); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(frames); {
			n, err := b.Read(bufs, sizes, 0)
			if err != nil {
				t.Fatal(wd.Err(err, got, len(frames)))
			}
			got += n
		}
	}
	cycle()
	if n := testing.AllocsPerRun(50, cycle); n != 0 {
		t.Fatalf("%v allocations per 32-frame GSO Write+Read", n)
	}
	if st := b.Stats(); st.RxGSO != 52 || st.RxGSOSegments != 52*32 {
		t.Fatalf("stats %+v: want 52 GSO frames (AllocsPerRun: 1 warm-up + 1 + 50) of 32 segments", st)
	}
}

// checkRC runs every RC operation with data checks, then 200 RDMA WRITEs of
// 64 KiB, between da and db at path MTU pmtu; an ICRC error on either
// device fails the test.
func checkRC(t *testing.T, da, db *hca.Device, pmtu bth.MTU) {
	t.Helper()
	p, err := bench.NewPair(da, db, bench.PairConfig{MTU: pmtu, BufSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range bench.RunChecks(ctx, p) {
		if c.Err != nil {
			t.Errorf("%s: %v", c.Name, c.Err)
		}
	}
	r, err := bench.WriteBW(ctx, p, 64<<10, 200, 16, 0)
	if err != nil {
		t.Fatalf("WriteBW: %v", err)
	}
	t.Logf("RDMA WRITE 64 KiB x %d: %.1f MB/s", r.Iters, r.BytesPerSec/1e6)
	if n := da.Counters.RxICRCErrors.Load() + db.Counters.RxICRCErrors.Load(); n != 0 {
		t.Errorf("%d ICRC errors", n)
	}
}

// readFrames reads n frames from r, in Reads of up to nbufs buffers of
// bufLen bytes, and calls each with every frame's index and bytes. A read
// error, more than n frames or linktest.Timeout without them fail t.
func readFrames(t *testing.T, r link.Endpoint, n, nbufs, bufLen int, each func(i int, f []byte)) {
	t.Helper()
	bufs := make([][]byte, nbufs)
	for i := range bufs {
		bufs[i] = make([]byte, bufLen)
	}
	sizes := make([]int, nbufs)
	wd := linktest.NewWatchdog(linktest.Timeout, r)
	defer wd.Stop()
	for got := 0; got < n; {
		k, err := r.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatal(wd.Err(err, got, n))
		}
		for j := range k {
			if got >= n {
				t.Fatalf("more than %d frames", n)
			}
			each(got, bufs[j][:sizes[j]])
			got++
		}
	}
}
