//go:build linux

package tun

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"unsafe"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/internal/vnet"
	"github.com/goroce/goroce/hca/link/linktest"
	"github.com/goroce/goroce/wire"
)

// fakeHost is an endpoint value that only answers Format and Addrs, for
// building frames with linktest.Frame.
func fakeHost(a string) *Endpoint {
	return &Endpoint{format: link.FormatIP, addrs: []netip.Addr{netip.MustParseAddr(a)}}
}

// TestBuild checks how Write groups a batch into messages (no kernel):
// which frames share a super-packet, and that each super-packet, split as
// the kernel would (IDs id0+i), gives back every frame with a valid ICRC.
func TestBuild(t *testing.T) {
	a4, b4, c4 := fakeHost("10.0.0.1"), fakeHost("10.0.0.2"), fakeHost("10.0.0.3")
	a6, b6 := fakeHost("fd00::1"), fakeHost("fd00::2")
	frame := func(src, dst *Endpoint, psn, payload int) []byte {
		f, err := linktest.Frame(src, dst, bth.PSN(psn), payload)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	run := func(src, dst *Endpoint, n, payload int) [][]byte {
		var fs [][]byte
		for i := range n {
			fs = append(fs, frame(src, dst, i, payload))
		}
		return fs
	}
	ttl := func(fs [][]byte, i int) [][]byte {
		fs[i] = slices.Clone(fs[i])
		fs[i][8]--
		// A changed TTL is masked by the ICRC; fix the header checksum.
		vnet.SetIPv4Checksum(fs[i][:20])
		return fs
	}
	for _, tc := range []struct {
		name   string
		frames [][]byte
		want   []int // frames per message; negative: sent whole
	}{
		{"20 of 4 KiB: 15 fit 64 KiB", run(a4, b4, 20, 4096), []int{15, 5}},
		{"short last ends the run", slices.Concat(run(a4, b4, 3, 4096), [][]byte{frame(a4, b4, 3, 100)}, run(a4, b4, 2, 4096)), []int{4, 2}},
		{"longer after shorter", slices.Concat([][]byte{frame(a4, b4, 0, 100)}, run(a4, b4, 3, 4096)), []int{-1, 3}},
		{"alternating destinations", [][]byte{frame(a4, b4, 0, 4096), frame(a4, c4, 0, 4096), frame(a4, b4, 1, 4096), frame(a4, c4, 1, 4096)}, []int{-1, -1, -1, -1}},
		{"small IPv4 run: powers of two", run(a4, b4, 10, 100), []int{8, 2}},
		{"long small IPv4 run", run(a4, b4, 50, 100), []int{50}},
		{"TTL change breaks the run", ttl(run(a4, b4, 4, 4096), 2), []int{2, -1, -1}},
		{"IPv6 small run: powers of two", run(a6, b6, 3, 100), []int{2, -1}},
		{"IPv6 1 KiB: 62 fit 64 KiB", run(a6, b6, 64, 1024), []int{62, 2}},
		{"single", run(a4, b4, 1, 4096), []int{-1}},
	} {
		for _, offset := range []int{0, 5} {
			t.Run(fmt.Sprintf("%s/offset=%d", tc.name, offset), func(t *testing.T) {
				e := &Endpoint{cfg: Config{BatchSize: 64}, format: link.FormatIP, off: allOffloads, mtu: 65535}
				e.tx.init(e)
				tx := &e.tx
				bufs := make([][]byte, len(tc.frames))
				for i, f := range tc.frames {
					bufs[i] = append(bytes.Repeat([]byte{0xEE}, offset), f...)
				}
				tx.frames, tx.offset = bufs, offset
				tx.build(true)
				var got []int
				fi := 0
				for _, m := range tx.msgs[:tx.nmsg] {
					var msg []byte
					for _, v := range tx.iovs[m.iov : m.iov+m.niov] {
						msg = append(msg, unsafe.Slice(v.Base, v.Len)...)
					}
					var h vnet.Hdr
					h.Decode(msg)
					pkt := msg[vnet.HdrLen:]
					if !m.gso {
						got = append(got, -1)
						if h != (vnet.Hdr{}) || !bytes.Equal(pkt, tc.frames[fi]) {
							t.Fatalf("frame %d not sent whole after a zero header", fi)
						}
						fi++
						continue
					}
					got = append(got, m.frames)
					hl := int(h.HdrLen)
					if !h.IsUDPL4() || h.Flags != vnet.FlagNeedsCsum || int(h.CsumStart) != hl-8 || h.CsumOffset != 6 {
						t.Fatalf("header %+v", h)
					}
					if pkt[0]>>4 == 4 && vnet.Fold(vnet.Sum(0, pkt[:20])) != 0xFFFF {
						t.Fatal("bad IPv4 header checksum on the super-packet")
					}
					// The partial UDP checksum is the pseudo-header sum.
					if c := binary.BigEndian.Uint16(pkt[hl-2:]); c != vnet.Fold(vnet.PseudoSum(pkt, len(pkt)-hl+8)) {
						t.Fatalf("UDP checksum field %#x is not the pseudo-header sum", c)
					}
					l, err := vnet.ParseUDPGSO(pkt, 0, int(h.GSOSize))
					if err != nil || l.Segs != m.frames {
						t.Fatalf("super-packet: %v, %d segments for %d frames", err, l.Segs, m.frames)
					}
					out := make([]byte, 9000)
					for s := range l.Segs {
						n := l.Segment(pkt, s, out)
						var p wire.Packet
						if err := p.Decode(out[:n], wire.FramingIP); err != nil {
							t.Fatalf("segment %d: %v", s, err)
						}
						if !linktest.Equivalent(out[:n], tc.frames[fi], link.FormatIP) {
							t.Fatalf("segment %d differs from frame %d", s, fi)
						}
						fi++
					}
				}
				if !slices.Equal(got, tc.want) || fi != len(tc.frames) {
					t.Fatalf("messages %v, want %v (%d of %d frames)", got, tc.want, fi, len(tc.frames))
				}
			})
		}
	}
}
