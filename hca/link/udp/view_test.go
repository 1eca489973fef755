package udp

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/wire"
)

// FuzzView4 is FuzzDeliver4 against the copy path: whatever IPv4 datagram
// the raw socket returns, ViewRead's in-place split passes exactly the
// frames, byte for byte and in order, that Read's copying split delivers,
// and counts the same drops, also when it is stopped every few frames and
// resumed (its segment i's headers overwrite segment i-1's last bytes).
func FuzzView4(f *testing.F) {
	dst := netip.MustParseAddr("10.1.0.2")
	for _, n := range []int{20, 40, 60, 4140, 8280, 3 * 1052} {
		d := make([]byte, ipv4Hdr+udpHdr+n)
		d[ipv4Hdr+udpHdr] = byte(bth.OpRCAcknowledge)
		f.Add(d, uint8(0))
	}
	f.Add(make([]byte, 10), uint8(1))
	const maxFrame = ipv4Hdr + udpHdr + maxRoCEPacket
	bufs := make([][]byte, 16)
	for i := range bufs {
		bufs[i] = make([]byte, maxFrame)
	}
	sizes := make([]int, len(bufs))
	f.Fuzz(func(t *testing.T, d []byte, stride uint8) {
		if len(d) > 20000 {
			return
		}
		asReceived(d, dst)
		var want [][]byte
		ec, ev := &Endpoint{cfg: Config{Addr: dst, Port: 4791}}, &Endpoint{cfg: Config{Addr: dst, Port: 4791}}
		rc := &rxState{e: ec}
		for dc := append([]byte(nil), d...); rc.cur == 0; {
			k := rc.deliver4(dc, bufs, sizes, 0)
			for i := range k {
				want = append(want, append([]byte(nil), bufs[i][:sizes[i]]...))
			}
			if k == 0 && rc.cur == 0 {
				t.Fatal("copy path made no progress")
			}
		}
		var got [][]byte
		rv := &rxState{e: ev}
		max := int(stride%7) + 1
		for dv := append([]byte(nil), d...); rv.cur == 0; {
			k := rv.view4(dv, max, maxFrame, func(fr []byte) { got = append(got, append([]byte(nil), fr...)) })
			if k > max {
				t.Fatalf("%d frames passed, max %d", k, max)
			}
			if k == 0 && rv.cur == 0 {
				t.Fatal("view path made no progress")
			}
		}
		if len(got) != len(want) {
			t.Fatalf("view passed %d frames, copy delivered %d", len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("frame %d differs:\n view %x\n copy %x", i, got[i], want[i])
			}
		}
		if sv, sc := ev.Stats(), ec.Stats(); sv != sc {
			t.Fatalf("counters: view %+v, copy %+v", sv, sc)
		}
	})
}

// TestViewRead receives the same traffic through Read and through ViewRead,
// over loopback (GSO super-datagrams split in place, and single
// datagrams), with and without the RX ring: the frames match byte for
// byte, ViewRead respects max across calls and does not allocate. IPv6
// says ErrNotSupported without consuming anything.
func TestViewRead(t *testing.T) {
	for _, ring := range []bool{false, true} {
		name := "raw"
		if ring {
			name = "rxring"
		}
		t.Run(name, func(t *testing.T) {
			ns := newNetNS(t)
			a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", func(c *Config) { c.RxRing = ring })
			defer a.Close()
			defer b.Close()
			frames := mustFrames(t, a, b, 0, 40, 1024)
			single := mustFrames(t, a, b, 40, 3, 100)
			send := func() {
				if _, err := a.Write(frames, 0); err != nil {
					t.Fatal(err)
				}
				for _, f := range single { // one at a time: no GSO run
					if _, err := a.Write([][]byte{f}, 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			total := len(frames) + len(single)
			send()
			want := readN(t, b, total)
			wd := linktest.NewWatchdog(linktest.Timeout, b)
			defer wd.Stop()
			send()
			var got [][]byte
			keep := func(fr []byte) { got = append(got, append([]byte(nil), fr...)) }
			for len(got) < total {
				n, err := b.ViewRead(true, 7, 2048, keep)
				if err != nil {
					t.Fatal(wd.Err(err, len(got), total))
				}
				if n > 7 {
					t.Fatalf("ViewRead passed %d frames, max 7", n)
				}
			}
			var p wire.Packet
			for i := range want {
				// The kernel numbers the two sends' IPv4 IDs apart, and
				// the ICRC covers the ID: those (and the header checksum)
				// differ, nothing else may; each frame must verify.
				if err := p.Decode(got[i], wire.FramingIP); err != nil {
					t.Fatalf("frame %d through ViewRead: %v", i, err)
				}
				w, g := bytes.Clone(want[i]), bytes.Clone(got[i])
				for _, b := range [][]byte{w, g} {
					b[4], b[5], b[10], b[11] = 0, 0, 0, 0
					clear(b[len(b)-4:])
				}
				if !bytes.Equal(w, g) {
					t.Fatalf("frame %d: view %x\nread %x", i, got[i], want[i])
				}
			}
			if st := b.Stats(); st.RxAggregates != 2 {
				t.Fatalf("receiver %+v: want 2 aggregates (one per send)", st)
			}
			n := 0
			count := func([]byte) { n++ }
			cycle := func() {
				if _, err := a.Write(frames, 0); err != nil {
					t.Fatal(err)
				}
				for n = 0; n < len(frames); {
					if _, err := b.ViewRead(true, 64, 2048, count); err != nil {
						t.Fatal(wd.Err(err, n, len(frames)))
					}
				}
			}
			cycle()
			if allocs := testing.AllocsPerRun(50, cycle); allocs != 0 {
				t.Fatalf("%v allocations per 40-frame Write+ViewRead", allocs)
			}
		})
	}
	t.Run("ipv6", func(t *testing.T) {
		ns := newNetNS(t, "fd00::1/128", "fd00::2/128")
		a, b := openPair(t, ns, "fd00::1", "fd00::2", nil)
		defer a.Close()
		defer b.Close()
		frames := mustFrames(t, a, b, 0, 4, 100)
		if _, err := a.Write(frames, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ViewRead(false, 64, 2048, func([]byte) { t.Fatal("IPv6 frame passed") }); !errors.Is(err, link.ErrNotSupported) {
			t.Fatalf("IPv6 ViewRead: %v, want ErrNotSupported", err)
		}
		readFrames(t, b, len(frames), nil) // nothing consumed
	})
}
