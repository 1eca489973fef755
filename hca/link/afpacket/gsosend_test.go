package afpacket

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/wire"
)

// roceFrame builds an Ethernet RoCEv2 RC SEND ONLY frame with the given
// IPv4 identification (ignored for IPv6) and a payload pattern from psn.
func roceFrame(t testing.TB, smac, dmac net.HardwareAddr, src, dst netip.Addr, psn, payload int, id uint16) []byte {
	t.Helper()
	a := &wire.Addr{Kind: wire.KindRoCEv2IPv4, SrcIP: src, DstIP: dst, HopLimit: 64, DontFragment: true,
		SrcPort: 0xC001, IPID: id}
	if src.Is6() {
		// A kernel UDP socket drops IPv6 datagrams without a checksum.
		a.Kind, a.UDPChecksum = wire.KindRoCEv2IPv6, true
	}
	copy(a.SrcMAC[:], smac)
	copy(a.DstMAC[:], dmac)
	hr := a.Headroom(wire.FramingEthernet)
	pad := (4 - payload%4) % 4
	n := bth.HeaderLen + payload + pad
	buf := make([]byte, hr+n+wire.Tailroom)
	bth.Header(buf[hr:]).Encode(&bth.Fields{Opcode: bth.OpRCSendOnly, PadCnt: pad, PKey: 0xFFFF,
		DestQP: 0x11, AckReq: true, PSN: bth.PSN(psn)})
	for i := range payload {
		buf[hr+bth.HeaderLen+i] = byte(psn*7 + i)
	}
	f, err := wire.Finish(buf, hr, n, wire.FramingEthernet, a)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// gsoBatch is a run of run equal-size frames (the last one 100 bytes of
// payload), then two frames of other sizes that cannot join it. seqIDs
// gives frame i the IPv4 ID 1000+i (what segmentation assigns: no ICRC
// patch), otherwise every frame has ID 0 (as a kernel UDP socket sends
// them with DF: all but the first of each super-packet patched).
func gsoBatch(t testing.TB, h *netcfg.Hosts, v6, seqIDs bool, run, pay int) [][]byte {
	src, dst := h.A.Addr, h.B.Addr
	if v6 {
		src, dst = h.A.Addr6, h.B.Addr6
	}
	frames := make([][]byte, run+2)
	for i := range frames {
		size, psn := pay, 500+i
		if i == run-1 {
			size = 100
		}
		if i >= run {
			size, psn = 64+i, 1000+10*i
		}
		id := uint16(0)
		if seqIDs {
			id = uint16(1000 + i)
		}
		frames[i] = roceFrame(t, h.A.MAC, h.B.MAC, src, dst, psn, size, id)
	}
	return frames
}

// perRun is how many frames of size full (Ethernet frame) one super-packet
// holds: 64 segments, a 64 KiB IP packet.
func perRun(full int, v6 bool) int {
	hl := 28
	if v6 {
		hl = 48
	}
	ip := full - ethHdr
	return min(64, (65535-hl)/(ip-hl))
}

// needGSO skips the rest of a test whose frames were checked but whose
// super-packet counts cannot hold: the kernel refused UDP_L4 from a packet
// socket (virtio_net_hdr_to_skb takes it from Linux 6.2; 6.1 returns
// EINVAL) and Write fell back to one frame per skb.
func needGSO(t *testing.T, e *Endpoint) {
	t.Helper()
	if !e.GSO() {
		t.Skip("kernel refuses UDP_L4 super-packets from packet sockets (Linux 6.2+); the fallback delivered every frame")
	}
}

// gsoSendCase is one way of sending a gsoBatch across a veth pair.
type gsoSendCase struct {
	name   string
	v6     bool
	seqIDs bool
	noGSO  bool
	mtu    int
	pay    int
}

var gsoSendCases = []gsoSendCase{
	{"ipv4-1024", false, false, false, 1500, 1024},
	{"ipv4-4096", false, false, false, 9000, 4096},
	{"ipv4-seqids", false, true, false, 1500, 1024},
	{"ipv6-1024", true, false, false, 1500, 1024},
	{"ipv6-4096", true, false, false, 9000, 4096},
	{"ipv4-nogso", false, false, true, 1500, 1024},
}

// open opens a (sending, with tc's NoGSO) and b on a fresh veth pair.
func (tc gsoSendCase) open(t *testing.T) (h *netcfg.Hosts, a, b *Endpoint) {
	t.Helper()
	h = netcfg.TwoHosts(t, netcfg.TwoHostsOptions{MTU: tc.mtu, IPv6: tc.v6})
	a, err := Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS, NoGSO: tc.noGSO})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if b, err = Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return h, a, b
}

// checkRunID fails t unless IPv4 frame f, received as frame got of a
// gsoBatch of run frames sent as frames, has the IPv4 ID it should: the one
// sent, or, when the run left as super-packets of per segments (gso), the
// ID segmentation assigns, id0+i.
func checkRunID(t *testing.T, f []byte, frames [][]byte, got, run, per int, gso bool) {
	t.Helper()
	wantID := binary.BigEndian.Uint16(frames[got][ethHdr+4:])
	if gso && got < run {
		first := got - got%per
		wantID = binary.BigEndian.Uint16(frames[first][ethHdr+4:]) + uint16(got%per)
	}
	if id := binary.BigEndian.Uint16(f[ethHdr+4:]); id != wantID {
		t.Fatalf("frame %d: IPv4 ID %d, want %d", got, id, wantID)
	}
}

// TestGSOSend sends runs of equal-size frames from one packet socket to
// another across a veth pair: each run leaves as one UDP GSO skb, the veth
// passes it whole and the receiving packet socket splits it. Every frame
// must arrive as sent (but for the IPv4 ID the segmentation assigns, id0+i,
// and the checksums), with a valid ICRC.
func TestGSOSend(t *testing.T) {
	for _, tc := range gsoSendCases {
		t.Run(tc.name, func(t *testing.T) {
			h, a, b := tc.open(t)
			const run = 40
			frames := gsoBatch(t, h, tc.v6, tc.seqIDs, run, tc.pay)
			n := len(frames)
			per := perRun(len(frames[0]), tc.v6)
			if w, err := a.Write(frames, 0); w != n || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			// 16 buffers, fewer than n: segments span Reads.
			var p wire.Packet
			readFrames(t, b, n, 16, tc.mtu+ethHdr, func(got int, f []byte) {
				want := frames[got]
				if !linktest.Equivalent(f, want, link.FormatEthernet) {
					t.Fatalf("frame %d is not the frame sent:\n got %x\nwant %x", got, f[:64], want[:64])
				}
				if err := p.Decode(f, wire.FramingEthernet); err != nil {
					t.Fatalf("frame %d: %v", got, err)
				}
				if !tc.v6 {
					checkRunID(t, f, frames, got, run, per, !tc.noGSO && a.GSO())
				}
			})
			if !tc.noGSO {
				needGSO(t, a)
			}
			as, bs := a.Stats(), b.Stats()
			runs := uint64((run + per - 1) / per)
			patched := uint64(0)
			if !tc.v6 && !tc.seqIDs {
				patched = run - runs // all but each super-packet's first
			}
			if tc.noGSO {
				runs, patched = 0, 0
			}
			if as.TxGSO != runs || bs.RxGSO != runs || as.TxICRCPatched != patched {
				t.Errorf("sent %d super-packets (%d ICRCs patched), receiver split %d; want %d (%d)",
					as.TxGSO, as.TxICRCPatched, bs.RxGSO, runs, patched)
			}
			if !tc.noGSO && (as.TxGSOSegments != run || bs.RxGSOSegments != run) {
				t.Errorf("%d segments sent, %d split; want %d", as.TxGSOSegments, bs.RxGSOSegments, run)
			}
			if as.TxFrames != uint64(n) || bs.RxFrames != uint64(n) || bs.RxTooLarge+bs.RxMalformed+bs.RxRunt != 0 {
				t.Errorf("sender %+v\nreceiver %+v", as, bs)
			}
			if a.GSO() == tc.noGSO {
				t.Errorf("GSO() = %v", a.GSO())
			}
		})
	}
}

// openToUDPLink opens an afpacket endpoint a on host A of a fresh veth
// pair and a udp link u on host B's address (IPv6 with v6), both closed
// when t ends.
func openToUDPLink(t *testing.T, v6 bool) (h *netcfg.Hosts, a *Endpoint, u *udp.Endpoint) {
	t.Helper()
	h = netcfg.TwoHosts(t, netcfg.TwoHostsOptions{IPv6: v6})
	dst := h.B.Addr
	if v6 {
		dst = h.B.Addr6
	}
	h.B.Do(t, func() (err error) {
		u, err = udp.Open(udp.Config{Addr: dst})
		return err
	})
	t.Cleanup(func() { u.Close() })
	a, err := Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return h, a, u
}

// TestGSOSendToUDPLink sends super-packets from a packet socket to the
// kernel IP stack of the far namespace, where the udp link receives them:
// over IPv4 its raw socket sees each skb whole and splits it itself, over
// IPv6 the kernel segments the skb for the UDP socket (udp_unexpected_gso)
// and the link rebuilds the headers. Either way every packet must decode
// with a valid ICRC and be the frame sent.
func TestGSOSendToUDPLink(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) {
			h, a, u := openToUDPLink(t, v6)
			const run = 40
			frames := gsoBatch(t, h, v6, false, run, 1024)
			n := len(frames)
			if w, err := a.Write(frames, 0); w != n || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			readFrames(t, u, n, 64, 2048, func(got int, f []byte) {
				checkFrame(t, got, f, frames[got][ethHdr:], link.FormatIP)
			})
			needGSO(t, a)
			if as := a.Stats(); as.TxGSO == 0 || as.TxGSOSegments != run {
				t.Errorf("sender %+v: want super-packets of %d segments in all", as, run)
			}
		})
	}
}

// TestGSORefusedAtWrite: a kernel whose packet sockets refuse UDP_L4
// super-packets (EINVAL, played by refuseGSO) turns GSO off for good, and
// the refused run and the rest of the batch are resent frame by frame.
func TestGSORefusedAtWrite(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	h := netcfg.TwoHosts(t, netcfg.TwoHostsOptions{})
	a, err := Open(Config{Interface: h.A.Ifname, NetNS: h.A.NS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := Open(Config{Interface: h.B.Ifname, NetNS: h.B.NS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	refuseGSO = true
	t.Cleanup(func() { refuseGSO = false })
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	wd := linktest.NewWatchdog(linktest.Timeout, b)
	defer wd.Stop()
	for round := range 2 {
		// Two frames alone first, so the refused run is not the batch's
		// first message.
		frames := gsoBatch(t, h, false, false, 40, 1024)
		frames = append(frames[40:], frames[:40]...)
		if w, err := a.Write(frames, 0); w != len(frames) || err != nil {
			t.Fatalf("round %d: Write = %d, %v", round, w, err)
		}
		var p wire.Packet
		for got := 0; got < len(frames); {
			k, err := b.Read(bufs, sizes, 0)
			if err != nil {
				t.Fatal(wd.Err(err, got, len(frames)))
			}
			for j := range k {
				f := bufs[j][:sizes[j]]
				if err := p.Decode(f, wire.FramingEthernet); err != nil || !linktest.Equivalent(f, frames[got], link.FormatEthernet) {
					t.Fatalf("round %d frame %d: %v or not the frame sent", round, got, err)
				}
				got++
			}
		}
		if a.GSO() {
			t.Fatal("GSO still on after EINVAL")
		}
	}
	if as, bs := a.Stats(), b.Stats(); as.TxGSO != 0 || as.TxICRCPatched != 0 || as.TxFrames != 84 || bs.RxFrames != 84 || bs.RxGSO != 0 {
		t.Fatalf("sender %+v\nreceiver %+v", as, bs)
	}
}

// TestGSOSendZeroAllocs: a Write of super-packets (ICRCs patched) and the
// Read that splits them allocate nothing once the ICRC basis for the frame
// length is cached.
func TestGSOSendZeroAllocs(t *testing.T) {
	a := zeroAllocRoundTrips(t, 1024)
	needGSO(t, a)
	if st := a.Stats(); st.TxGSO == 0 || st.TxICRCPatched == 0 {
		t.Fatalf("no super-packets sent: %+v", st)
	}
}

// TestRCOverVethGSO runs every RC operation with data checks, then a 64
// KiB RDMA WRITE bandwidth run, between two HCAs on packet sockets whose
// writes send super-packets; ICRC errors fail it.
func TestRCOverVethGSO(t *testing.T) {
	for _, pmtu := range []bth.MTU{bth.MTU1024, bth.MTU4096} {
		t.Run(pmtu.String(), func(t *testing.T) {
			da, db, a, b := openDevices(t, netcfg.TwoHostsOptions{MTU: 9000}, false)
			checkRC(t, da, db, pmtu)
			needGSO(t, a)
			as, bs := a.Stats(), b.Stats()
			t.Logf("A sent %d frames, %d super-packets (%d segments); B split %d into %d",
				as.TxFrames, as.TxGSO, as.TxGSOSegments, bs.RxGSO, bs.RxGSOSegments)
			if as.TxGSO == 0 || bs.RxGSO != as.TxGSO || bs.RxGSOSegments != as.TxGSOSegments {
				t.Errorf("A sent %d super-packets of %d segments, B split %d into %d",
					as.TxGSO, as.TxGSOSegments, bs.RxGSO, bs.RxGSOSegments)
			}
			if bs.RxTooLarge+bs.RxMalformed+bs.RxRunt+as.RxTooLarge+as.RxMalformed+as.RxRunt != 0 {
				t.Errorf("drops: %+v %+v", as, bs)
			}
		})
	}
}
