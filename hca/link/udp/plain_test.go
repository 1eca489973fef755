package udp

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/vnet"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/wire"
)

// A PlainIPv4 endpoint does not see the IPv4 header of what it receives,
// yet must hand the HCA the exact header the sender's ICRC covers. Frames
// come from a raw IP_HDRINCL socket with the IDs a kernel rxe would pick
// (random), DF set or clear, and TOS and TTL of their own: each must come
// out byte for byte as sent, its ICRC verifying. A frame whose ICRC is
// corrupt comes out too, counted as unsolved, and fails wire.Decode.
func TestPlainIPv4RecoversHeader(t *testing.T) {
	ns := newNetNS(t)
	var fd int
	ns.do(t, func() {
		var err error
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW); err != nil {
			t.Fatal(err)
		}
	})
	defer unix.Close(fd)
	a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", func(c *Config) { c.PlainIPv4 = true })
	defer a.Close()
	defer b.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	var sent [][]byte
	for i, size := range []int{0, 2, 100, 1024, 4096, 0, 8, 4000} {
		f, err := linktest.Frame(a, b, bth.PSN(10+i), size)
		if err != nil {
			t.Fatal(err)
		}
		// Not 0: for ID 0 the kernel picks one for an IP_HDRINCL packet
		// (what an unconnected sender's ID 0 does is in the conformance
		// runs).
		id := uint16(rng.Uint32()) | 1
		binary.BigEndian.PutUint16(f[4:], id)
		if i%3 == 1 {
			f[6] &^= 0x40 // DF clear: allowed, if not what RoCE senders do
		}
		f[1] = byte(i << 2) // DSCP, masked in the ICRC
		f[8] = byte(30 + i) // TTL, masked
		setICRC(t, f)
		vnet.SetIPv4Checksum(f[:ipv4Hdr])
		sent = append(sent, f)
	}
	corrupt := bytes.Clone(sent[3])
	corrupt[len(corrupt)-10] ^= 0x01
	frames := append(sent, corrupt)
	for _, f := range frames {
		sa := &unix.SockaddrInet4{Addr: [4]byte(f[16:20])}
		if err := unix.Sendto(fd, f, 0, sa); err != nil {
			t.Fatalf("raw sendto: %v", err)
		}
	}

	got := readN(t, b, len(frames))
	var p wire.Packet
	for i, f := range sent {
		if !bytes.Equal(got[i], f) {
			t.Errorf("frame %d (ID %#04x, flags %#02x):\n got %x\nwant %x", i, binary.BigEndian.Uint16(f[4:]), f[6], got[i][:28], f[:28])
		}
		if err := p.Decode(got[i], wire.FramingIP); err != nil {
			t.Errorf("frame %d: %v", i, err)
		}
	}
	if err := p.Decode(got[len(sent)], wire.FramingIP); err != wire.ErrBadICRC {
		t.Errorf("corrupt frame: Decode = %v, want ErrBadICRC", err)
	}
	st := b.Stats()
	if st.RxIDSolved != uint64(len(sent)) || st.RxIDUnsolved != 1 {
		t.Errorf("RxIDSolved %d, RxIDUnsolved %d; want %d and 1", st.RxIDSolved, st.RxIDUnsolved, len(sent))
	}
}

// setICRC writes the ICRC of IPv4 RoCEv2 frame f over its current header.
func setICRC(t testing.TB, f []byte) {
	t.Helper()
	p := wire.Packet{Frame: f, Kind: wire.KindRoCEv2IPv4, IPOff: 0, UDPOff: ipv4Hdr, BTHOff: ipv4Hdr + udpHdr,
		ICRCOff: len(f) - 4, LRHOff: -1, GRHOff: -1, EthOff: -1, VCRCOff: -1}
	binary.LittleEndian.PutUint32(f[len(f)-4:], wire.ICRC(f, &p))
}

// Frames from a sender with connected sockets (IDs from the socket's
// counter, GSO segments numbered on) reach a PlainIPv4 receiver with their
// ICRCs verifying: the receiver finds every ID.
func TestPlainIPv4FromConnectedSender(t *testing.T) {
	ns := newNetNS(t)
	var a, b *Endpoint
	ns.do(t, func() {
		var err error
		if a, err = Open(Config{Addr: netip.MustParseAddr("127.0.0.1")}); err != nil {
			t.Fatal(err)
		}
		if b, err = Open(Config{Addr: netip.MustParseAddr("127.0.0.2"), PlainIPv4: true}); err != nil {
			a.Close()
			t.Fatal(err)
		}
	})
	defer a.Close()
	defer b.Close()
	var frames [][]byte
	for i := range 40 {
		f, err := linktest.Frame(a, b, bth.PSN(100+i), 1024)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	for k := 0; k < 3; k++ { // three writes: the connected socket's counter moves on
		if _, err := a.Write(frames, 0); err != nil {
			t.Fatal(err)
		}
		if err := linktest.ReadFrames(b, 0, frames); err != nil {
			t.Fatal(err)
		}
	}
	if a.Stats().TxConnected == 0 {
		t.Fatal("the sender used no connected socket: the test would not see IDs other than GSO's")
	}
	if st := b.Stats(); st.RxIDUnsolved != 0 || st.RxIDSolved != 3*40 || st.RxAggregates == 0 {
		t.Errorf("RxIDSolved %d, RxIDUnsolved %d, RxAggregates %d; want 120, 0 and GSO runs arriving whole",
			st.RxIDSolved, st.RxIDUnsolved, st.RxAggregates)
	}
}

// FuzzDirect4 feeds arbitrary UDP payloads, as a PlainIPv4 socket returns
// them, to the header rebuild: nothing panics, the frame is the payload
// behind a 28-byte IPv4 and UDP header with a valid header checksum, and
// a packet counted as solved carries an ICRC that verifies over the
// rebuilt header.
func FuzzDirect4(f *testing.F) {
	src, dst := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2")
	for _, n := range []int{0, 15, 16, 20, 60, 4112} {
		p := make([]byte, n)
		if n > 0 {
			p[0] = byte(bth.OpRCSendOnly)
		}
		f.Add(p, uint16(0x1234))
	}
	// Packets with valid ICRCs over IDs 0x1234 (DF set) and 7 (DF clear):
	// the solved branch.
	for i, n := range []int{16, 1040} {
		fr := make([]byte, ipv4Hdr+udpHdr+n)
		fr[0] = 0x45
		binary.BigEndian.PutUint16(fr[2:], uint16(len(fr)))
		binary.BigEndian.PutUint16(fr[4:], []uint16{0x1234, 7}[i])
		fr[6] = []byte{0x40, 0}[i]
		fr[9] = unix.IPPROTO_UDP
		copy(fr[12:], src.AsSlice())
		copy(fr[16:], dst.AsSlice())
		binary.BigEndian.PutUint16(fr[20:], 0xC000)
		binary.BigEndian.PutUint16(fr[22:], 4791)
		binary.BigEndian.PutUint16(fr[24:], uint16(udpHdr+n))
		fr[28] = byte(bth.OpRCSendOnly)
		setICRC(f, fr)
		f.Add(fr[ipv4Hdr+udpHdr:], uint16(0xC000))
	}
	f.Fuzz(func(t *testing.T, payload []byte, sport uint16) {
		if len(payload) > 9000 {
			return
		}
		e := &Endpoint{cfg: Config{Addr: dst, Port: 4791, PlainIPv4: true, BatchSize: 1}, plain4: true}
		r := &rxState{}
		r.init(e, nil, nil)
		buf := make([]byte, ipv4Hdr+udpHdr+len(payload))
		copy(buf[ipv4Hdr+udpHdr:], payload)
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&r.sa6[0]))
		sa.Family, sa.Addr = unix.AF_INET, src.As4()
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], sport)
		// IP_PKTINFO naming dst, as the kernel writes it.
		oob := r.oob[:unix.CmsgSpace(unix.SizeofInet4Pktinfo)]
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		copy(oob[unix.CmsgLen(0)+8:], dst.AsSlice())
		m := &r.msgs[0]
		m.Len = uint32(len(payload))
		m.Hdr.SetControllen(len(oob))
		if !r.direct4(m, 0, buf, buf) {
			t.Fatalf("datagram of %d bytes to the endpoint's address dropped", len(payload))
		}
		fr := buf[:ipv4Hdr+udpHdr+len(payload)]
		if !wire.IPv4(fr).IsChecksumValid() || wire.IPv4(fr).TotalLength() != len(fr) {
			t.Fatalf("bad IPv4 header %x", fr[:ipv4Hdr])
		}
		if !bytes.Equal(fr[ipv4Hdr+udpHdr:], payload) {
			t.Fatal("payload changed")
		}
		if r.e.st.rxIDSolved.Load() == 1 {
			p := wire.Packet{Frame: fr, Kind: wire.KindRoCEv2IPv4, IPOff: 0, UDPOff: ipv4Hdr, BTHOff: ipv4Hdr + udpHdr,
				ICRCOff: len(fr) - 4, LRHOff: -1, GRHOff: -1, EthOff: -1, VCRCOff: -1}
			if wire.ICRC(fr, &p) != binary.LittleEndian.Uint32(fr[len(fr)-4:]) {
				t.Fatalf("solved, yet the ICRC does not verify over %x", fr[:ipv4Hdr])
			}
		}
	})
}

// noGRO turns a PlainIPv4 endpoint's receive path to the one it takes on a
// kernel without UDP GRO: the kernel segments what arrives coalesced, and
// recvmmsg writes into the caller's buffers behind room for the headers.
func noGRO(t testing.TB, e *Endpoint) {
	t.Helper()
	var err error
	if cerr := e.udpRC.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 0)
	}); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.gro4, e.rx.direct = false, true
}

// The conformance suite on the PlainIPv4 path a kernel without UDP GRO
// leaves (direct4).
func TestConformancePlainNoGRO(t *testing.T) {
	ns := newNetNS(t)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"gso", func(c *Config) { c.PlainIPv4 = true }},
		{"sendmmsg", func(c *Config) { c.PlainIPv4 = true; c.NoGSO = true }},
		{"mtu1500", func(c *Config) { c.PlainIPv4 = true; c.MTU = 1500; c.BatchSize = 8 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) (link.Endpoint, link.Endpoint) {
				a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", tc.mod)
				if !a.gro4 || !b.gro4 {
					t.Fatal("PlainIPv4 endpoints opened without UDP GRO")
				}
				noGRO(t, a)
				noGRO(t, b)
				return a, b
			})
		})
	}
}

// FuzzDeliverPlain feeds arbitrary datagrams and GRO segment sizes, as a
// PlainIPv4 socket with UDP GRO returns them, to the splitter: nothing
// panics, the frames' payloads put together are the datagram, each frame
// has a valid IPv4 header of its length, and a packet counted as solved
// carries an ICRC that verifies.
func FuzzDeliverPlain(f *testing.F) {
	src, dst := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2")
	f.Add(make([]byte, 100), uint16(0))
	f.Add(make([]byte, 4112*3+20), uint16(4112))
	f.Add(make([]byte, 40), uint16(16))
	f.Fuzz(func(t *testing.T, d []byte, gro uint16) {
		if len(d) > 65507 || len(d) == 0 {
			return
		}
		e := &Endpoint{cfg: Config{Addr: dst, Port: 4791, PlainIPv4: true, BatchSize: 4}, plain4: true, gro4: true}
		r := &rxState{}
		r.init(e, nil, nil)
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&r.sa6[0]))
		sa.Family, sa.Addr = unix.AF_INET, src.As4()
		oob := r.oob[:oobSize]
		n := 0
		for _, c := range []struct {
			level, typ int
			data       []byte
		}{
			{unix.IPPROTO_IP, unix.IP_PKTINFO, append(make([]byte, 8), dst.AsSlice()...)},
			{unix.IPPROTO_UDP, unix.UDP_GRO, binary.NativeEndian.AppendUint32(nil, uint32(gro))},
		} {
			h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[n]))
			h.Level, h.Type = int32(c.level), int32(c.typ)
			h.SetLen(unix.CmsgLen(len(c.data)))
			copy(oob[n+unix.CmsgLen(0):], c.data)
			n += unix.CmsgSpace(len(c.data))
		}
		m := &r.msgs[0]
		m.Len = uint32(len(d))
		m.Hdr.SetControllen(n)
		r.got, r.cur = 1, 0
		bufs := make([][]byte, 4)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		sizes := make([]int, len(bufs))
		var joined []byte
		frames, verified := 0, 0
		for r.cur == 0 {
			k := r.deliverPlain(m, d, bufs, sizes, 0)
			for i := range k {
				fr := bufs[i][:sizes[i]]
				if !wire.IPv4(fr).IsChecksumValid() || wire.IPv4(fr).TotalLength() != len(fr) {
					t.Fatalf("frame %d: bad IPv4 header %x", frames+i, fr[:ipv4Hdr])
				}
				joined = append(joined, fr[ipv4Hdr+udpHdr:]...)
				if len(fr) >= ipv4Hdr+udpHdr+bth12+4 {
					p := wire.Packet{Frame: fr, Kind: wire.KindRoCEv2IPv4, IPOff: 0, UDPOff: ipv4Hdr, BTHOff: ipv4Hdr + udpHdr,
						ICRCOff: len(fr) - 4, LRHOff: -1, GRHOff: -1, EthOff: -1, VCRCOff: -1}
					if wire.ICRC(fr, &p) == binary.LittleEndian.Uint32(fr[len(fr)-4:]) {
						verified++
					}
				}
			}
			frames += k
			if frames > len(d) {
				t.Fatalf("%d frames from %d bytes", frames, len(d))
			}
		}
		if r.e.st.rxTooLarge.Load() == 0 && !bytes.Equal(joined, d) {
			t.Fatalf("the frames' payloads are not the datagram (GRO size %d)", gro)
		}
		// Solved exactly when the ICRC verifies over the rebuilt header.
		if solved := r.e.st.rxIDSolved.Load(); solved != uint64(verified) {
			t.Fatalf("%d frames counted as solved, %d verify", solved, verified)
		}
	})
}
