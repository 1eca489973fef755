package udp

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/wire"
)

// TestFixedLengthRun: a run led by a packet of fixed length (an ACK) takes
// any following packets of that length to the same destination, of any QP,
// into one GSO super-datagram (a deferred ACK and the 2-byte SEND it
// travels with, or the ACKs of several QPs); the receiver splits it by the
// leading opcode's length. Runs led by a payload-carrying packet still
// need one flow.
func TestFixedLengthRun(t *testing.T) {
	for _, tc := range []struct {
		v6, gro bool
	}{{false, true}, {true, true}, {true, false}} {
		v6 := tc.v6
		name, sa, da, extra := "ipv4", "127.0.0.1", "127.0.0.2", []string(nil)
		if v6 {
			name, sa, da, extra = "ipv6", "fd00::1", "fd00::2", []string{"fd00::1/128", "fd00::2/128"}
			if tc.gro {
				name += "-gro" // the receiver splits by the GRO segment size
			} // else the kernel segments for the UDP socket
		}
		t.Run(name, func(t *testing.T) {
			ns := newNetNS(t, extra...)
			a, b := openPair(t, ns, sa, da, func(c *Config) { c.GRO = tc.gro })
			defer a.Close()
			defer b.Close()
			if !a.GSO() {
				t.Skip("kernel has no UDP_SEGMENT")
			}
			ack := func(qpn bth.QPN, psn bth.PSN) []byte {
				f, err := linktest.ACK(a, b, qpn, psn)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			send := func(psn bth.PSN, n int) []byte {
				f, err := linktest.Frame(a, b, psn, n)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
			hdr := ipv4Hdr + udpHdr
			if v6 {
				hdr = ipv6Hdr + udpHdr
			}
			if got := len(ack(1, 1)) - hdr; got != 20 || len(send(1, 2))-hdr != got {
				t.Fatalf("ACK %d bytes, 2-byte SEND_ONLY %d: want 20 each", got, len(send(1, 2))-hdr)
			}
			for _, tc := range []struct {
				name    string
				frames  [][]byte
				batches uint64 // GSO super-datagrams sent
			}{
				{"ACK then 2-byte SEND", [][]byte{ack(0x12, 7), send(100, 2)}, 1},
				{"ACKs of four QPs and a short last", [][]byte{ack(0x12, 1), ack(0x13, 2), ack(0x14, 3), ack(0x15, 4), send(101, 0)}, 1},
				{"SEND then ACK (no fixed leader, two flows)", [][]byte{send(102, 2), ack(0x12, 8)}, 0},
				{"ACK then a longer SEND", [][]byte{ack(0x12, 9), send(103, 200)}, 0},
			} {
				before, rbefore := a.Stats(), b.Stats()
				if w, err := a.Write(tc.frames, 0); w != len(tc.frames) || err != nil {
					t.Fatalf("%s: Write = %d, %v", tc.name, w, err)
				}
				got := readN(t, b, len(tc.frames))
				for i, f := range got {
					var p wire.Packet
					if err := p.Decode(f, wire.FramingIP); err != nil {
						t.Errorf("%s: frame %d: %v", tc.name, i, err)
					}
					if !linktest.Equivalent(f, tc.frames[i], link.FormatIP) {
						t.Errorf("%s: frame %d differs from what was sent", tc.name, i)
					}
				}
				after, rafter := a.Stats(), b.Stats()
				if d := after.TxGSOBatches - before.TxGSOBatches; d != tc.batches {
					t.Errorf("%s: %d GSO batches, want %d", tc.name, d, tc.batches)
				}
				if !v6 && rafter.RxAggregates-rbefore.RxAggregates != tc.batches {
					t.Errorf("%s: receiver split %d aggregates, want %d", tc.name, rafter.RxAggregates-rbefore.RxAggregates, tc.batches)
				}
			}
		})
	}
}

// TestShortEqualRun: a short run of one flow's packets of one length goes
// in powers of two (37 packets: 32 + 4 + 1, two super-datagrams and a
// datagram), which every receiver splits back into the packets sent: the
// raw IPv4 socket, its RX ring, PlainIPv4's UDP socket, IPv6 with and
// without GRO. 37 packets of 100 bytes are longer than one RoCE packet:
// one super-datagram.
func TestShortEqualRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		v6   bool
		mod  func(*Config)
	}{
		{"ipv4", false, nil},
		{"ipv4-rxring", false, func(c *Config) { c.RxRing = true }},
		{"ipv4-plain", false, func(c *Config) { c.PlainIPv4 = true }},
		{"ipv6-gro", true, func(c *Config) { c.GRO = true }},
		{"ipv6", true, func(c *Config) { c.GRO = false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sa, da, extra := "127.0.0.1", "127.0.0.2", []string(nil)
			if tc.v6 {
				sa, da, extra = "fd00::1", "fd00::2", []string{"fd00::1/128", "fd00::2/128"}
			}
			ns := newNetNS(t, extra...)
			a, b := openPair(t, ns, sa, da, tc.mod)
			defer a.Close()
			defer b.Close()
			if !a.GSO() {
				t.Skip("kernel has no UDP_SEGMENT")
			}
			for _, pc := range []struct{ payload, supers int }{{2, 2}, {32, 2}, {64, 2}, {100, 1}} {
				payload := pc.payload
				frames := mustFrames(t, a, b, 10, 37, payload)
				before, rbefore := a.Stats(), b.Stats()
				if w, err := a.Write(frames, 0); w != len(frames) || err != nil {
					t.Fatalf("%d bytes: Write = %d, %v", payload, w, err)
				}
				got := readN(t, b, len(frames))
				for i, f := range got {
					if !linktest.Equivalent(f, frames[i], link.FormatIP) {
						t.Fatalf("%d bytes: frame %d differs from what was sent", payload, i)
					}
				}
				after, rafter := a.Stats(), b.Stats()
				if d := after.TxGSOBatches - before.TxGSOBatches; d != uint64(pc.supers) {
					t.Errorf("%d bytes: %d GSO super-datagrams, want %d", payload, d, pc.supers)
				}
				if d := rafter.RxAggregates - rbefore.RxAggregates; !tc.v6 && !b.cfg.PlainIPv4 && d != uint64(pc.supers) {
					t.Errorf("%d bytes: receiver split %d aggregates, want %d", payload, d, pc.supers)
				}
			}
		})
	}
}

// readN reads n frames from e and returns copies of them.
func readN(t *testing.T, e *Endpoint, n int) [][]byte {
	t.Helper()
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 9000)
	}
	sizes := make([]int, len(bufs))
	wd := linktest.NewWatchdog(linktest.Timeout, e)
	defer wd.Stop()
	var out [][]byte
	for len(out) < n {
		k, err := e.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatal(wd.Err(err, len(out), n))
		}
		for i := range k {
			out = append(out, append([]byte(nil), bufs[i][:sizes[i]]...))
		}
	}
	if len(out) != n {
		t.Fatalf("read %d frames, want %d", len(out), n)
	}
	return out
}

// TestSplitMixedQPs: the afpacket and tun links send equal-size packets of
// several QPs to one destination as one super-packet, which a veth passes
// whole, so the raw socket shows it whole and Read must split it although
// its segments do not continue one flow.
func TestSplitMixedQPs(t *testing.T) {
	src, dst := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2")
	const n, payload = 3, 3000
	var frames [][]byte
	for s := range n {
		// Segment s carries IP ID s, as the kernel numbers them.
		a := &wire.Addr{Kind: wire.KindRoCEv2IPv4, SrcIP: src, DstIP: dst, HopLimit: 64,
			DontFragment: true, SrcPort: 0xC000, IPID: uint16(s)}
		hr := a.Headroom(wire.FramingIP)
		m := bth.HeaderLen + payload
		buf := make([]byte, hr+m+wire.Tailroom)
		bth.Header(buf[hr:]).Encode(&bth.Fields{Opcode: bth.OpRCSendOnly, PKey: 0xFFFF,
			DestQP: bth.QPN(0x20 + s), PSN: bth.PSN(1000 * s)})
		for i := range payload {
			buf[hr+bth.HeaderLen+i] = byte(i*7 + s)
		}
		f, err := wire.Finish(buf, hr, m, wire.FramingIP, a)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	const h = ipv4Hdr + udpHdr
	d := append([]byte(nil), frames[0][:h]...)
	for _, f := range frames {
		d = append(d, f[h:]...)
	}
	binary.BigEndian.PutUint16(d[2:], uint16(len(d)))
	binary.BigEndian.PutUint16(d[24:], uint16(len(d)-ipv4Hdr))
	r := &rxState{e: &Endpoint{cfg: Config{Addr: dst, Port: 4791}}}
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
	}
	sizes := make([]int, len(bufs))
	k := r.deliver4(d, bufs, sizes, 0)
	if k != n {
		t.Fatalf("split into %d frames, want %d", k, n)
	}
	for s := range n {
		f := bufs[s][:sizes[s]]
		var p wire.Packet
		if err := p.Decode(f, wire.FramingIP); err != nil {
			t.Errorf("segment %d: %v", s, err)
		}
		if !linktest.Equivalent(f, frames[s], link.FormatIP) {
			t.Errorf("segment %d differs from frame %d", s, s)
		}
	}
	if got := r.e.st.rxAggregates.Load(); got != 1 {
		t.Errorf("%d aggregates counted, want 1", got)
	}
}

// FuzzDeliver4 feeds arbitrary IPv4 datagrams, as the raw socket would
// return them (the length fields made consistent so that the splitter is
// reached), to the receive path: nothing panics, every frame delivered fits
// its buffer and is at most a maximal RoCE packet with its headers, and a
// datagram yields at most 2*maxGSOSegments frames.
func FuzzDeliver4(f *testing.F) {
	dst := netip.MustParseAddr("10.1.0.2")
	for _, n := range []int{20, 40, 60, 4140, 8280} {
		d := make([]byte, ipv4Hdr+udpHdr+n)
		d[ipv4Hdr+udpHdr] = byte(bth.OpRCAcknowledge)
		f.Add(d)
	}
	f.Add(make([]byte, 10))
	e := &Endpoint{cfg: Config{Addr: dst, Port: 4791}}
	bufs := make([][]byte, 16)
	for i := range bufs {
		bufs[i] = make([]byte, ipv4Hdr+udpHdr+maxRoCEPacket)
	}
	sizes := make([]int, len(bufs))
	f.Fuzz(func(t *testing.T, d []byte) {
		if len(d) > 20000 {
			return // five full-MTU segments explore the splitter; more only slow the fuzzer down
		}
		asReceived(d, dst)
		r := &rxState{e: e}
		total := 0
		for r.cur == 0 {
			k := r.deliver4(d, bufs, sizes, 0)
			for i := range k {
				if sizes[i] < 0 || sizes[i] > len(bufs[i]) {
					t.Fatalf("frame %d: size %d, buffer %d", total+i, sizes[i], len(bufs[i]))
				}
				if h := wire.IPv4(bufs[i][:sizes[i]]); sizes[i] >= ipv4Hdr && !h.IsChecksumValid() {
					t.Fatalf("frame %d: IPv4 header checksum %#04x does not verify", total+i, h.Checksum())
				}
			}
			if total += k; total > 2*maxGSOSegments {
				t.Fatalf("%d frames from one datagram of %d bytes", total, len(d))
			}
			if k == 0 && r.cur == 0 {
				t.Fatalf("no progress on a datagram of %d bytes", len(d))
			}
		}
	})
}

// asReceived makes fuzz input d look like what the raw socket returns for
// dst:4791 (when it holds the headers at all): IPv4 over UDP, consistent
// lengths, a header checksum the IP layer has checked, so that the
// splitter is reached.
func asReceived(d []byte, dst netip.Addr) {
	if len(d) < ipv4Hdr+udpHdr {
		return
	}
	d[0], d[9] = 0x45, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(d[2:], uint16(len(d)))
	copy(d[16:20], dst.AsSlice())
	binary.BigEndian.PutUint16(d[22:], 4791)
	binary.BigEndian.PutUint16(d[24:], uint16(len(d)-ipv4Hdr))
	wire.IPv4(d).SetChecksum(wire.IPv4(d).CalculateChecksum())
}
