package afpacket

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/hca/link/internal/vnet"
	"github.com/goroce/goroce/wire"
)

// superFrame builds an untagged Ethernet frame holding one IPv4 or IPv6
// UDP datagram of payload bytes, with the lengths of the whole and the UDP
// checksum left as CHECKSUM_PARTIAL leaves it (the pseudo-header sum).
func superFrame(v6 bool, payload []byte, id uint16) []byte {
	ipLen, et := 20, uint16(etherTypeIPv4)
	if v6 {
		ipLen, et = 40, etherTypeIPv6
	}
	f := make([]byte, ethHdr+ipLen+8+len(payload))
	copy(f[0:6], []byte{2, 0, 0, 0, 0, 2})
	copy(f[6:12], []byte{2, 0, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(f[12:], et)
	ip := f[ethHdr:]
	ulen := 8 + len(payload)
	if v6 {
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(ulen))
		ip[6], ip[7] = 17, 64
		ip[8], ip[23] = 0xfd, 1
		ip[24], ip[39] = 0xfd, 2
	} else {
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+ulen))
		binary.BigEndian.PutUint16(ip[4:], id)
		ip[6], ip[8], ip[9] = 0x40, 64, 17
		copy(ip[12:16], []byte{10, 0, 0, 1})
		copy(ip[16:20], []byte{10, 0, 0, 2})
		wire.IPv4(ip).SetChecksum(wire.IPv4(ip).CalculateChecksum())
	}
	u := ip[ipLen:]
	binary.BigEndian.PutUint16(u[0:], 49152)
	binary.BigEndian.PutUint16(u[2:], 4791)
	binary.BigEndian.PutUint16(u[4:], uint16(ulen))
	copy(u[8:], payload)
	return f
}

func addrs(f []byte, v6 bool) (src, dst netip.Addr) {
	ip := f[ethHdr:]
	if v6 {
		return netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	}
	return netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
}

func TestGSOSegmentFields(t *testing.T) {
	payload := make([]byte, 2500)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for _, v6 := range []bool{false, true} {
		f := superFrame(v6, payload, 0xFFFE) // the ID wraps: 0xFFFE, 0xFFFF, 0
		l, err := parseGSO(f, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if l.Segs != 3 {
			t.Fatalf("v6=%v: %d segments, want 3", v6, l.Segs)
		}
		var joined []byte
		out := make([]byte, 2048)
		for s := range l.Segs {
			n := gsoSegment(f, &l, 1000, s, out)
			want := min(1000, 2500-1000*s)
			if n != l.Payload+want {
				t.Fatalf("v6=%v segment %d: %d bytes, want %d", v6, s, n, l.Payload+want)
			}
			g := out[:n]
			src, dst := addrs(g, v6)
			u := wire.UDP(g[l.UDP:])
			if u.Length() != 8+want || !u.IsChecksumValid(src, dst) || u.Checksum() == 0 {
				t.Fatalf("v6=%v segment %d: UDP length %d checksum %#x", v6, s, u.Length(), u.Checksum())
			}
			if v6 {
				if pl := binary.BigEndian.Uint16(g[ethHdr+4:]); int(pl) != 8+want {
					t.Fatalf("segment %d: payload length %d", s, pl)
				}
			} else {
				ip := wire.IPv4(g[ethHdr:])
				if ip.ID() != 0xFFFE+uint16(s) || !ip.IsChecksumValid() || int(binary.BigEndian.Uint16(g[ethHdr+2:])) != n-ethHdr {
					t.Fatalf("segment %d: ID %#x checksum ok %v", s, ip.ID(), ip.IsChecksumValid())
				}
			}
			if !bytes.Equal(g[:ethHdr], f[:ethHdr]) {
				t.Fatalf("segment %d: Ethernet header changed", s)
			}
			joined = append(joined, g[l.Payload:]...)
		}
		if !bytes.Equal(joined, payload) {
			t.Fatalf("v6=%v: segments do not add up to the payload", v6)
		}
		// A buffer one byte short gets nothing.
		if n := gsoSegment(f, &l, 1000, 0, out[:l.Payload+999]); n != 0 {
			t.Fatalf("short buffer: %d bytes written", n)
		}
	}
}

func TestParseGSOErrors(t *testing.T) {
	good := superFrame(false, make([]byte, 300), 0)
	for _, tc := range []struct {
		name string
		mod  func(f []byte) []byte
		gso  int
	}{
		{"gso-size-0", nil, 0},
		{"short", func(f []byte) []byte { return f[:50] }, 100},
		{"ethertype", func(f []byte) []byte { f[12] = 0x89; return f }, 100},
		{"tcp", func(f []byte) []byte { f[ethHdr+9] = 6; return f }, 100},
		{"fragment", func(f []byte) []byte { f[ethHdr+7] = 1; return f }, 100},
		{"ihl", func(f []byte) []byte { f[ethHdr] = 0x44; return f }, 100},
		{"ip-length", func(f []byte) []byte { f[ethHdr+3]++; return f }, 100},
		{"udp-length", func(f []byte) []byte { f[ethHdr+25]--; return f }, 100},
		{"truncated", func(f []byte) []byte { return f[:len(f)-1] }, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := bytes.Clone(good)
			if tc.mod != nil {
				f = tc.mod(f)
			}
			if _, err := parseGSO(f, tc.gso); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, err := parseGSO(good, 100); err != nil {
		t.Fatalf("the unmodified frame: %v", err)
	}
}

// TestFinishChecksum completes a CHECKSUM_PARTIAL UDP checksum as
// skb_checksum_help does and checks the result verifies.
func TestFinishChecksum(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, size := range []int{0, 1, 77, 1024} {
			payload := bytes.Repeat([]byte{0xA5, 0x17, 0x3C}, size)[:size]
			f := superFrame(v6, payload, 0)
			l := gsoLayout{IP: ethHdr, UDP: ethHdr + 20, V6: v6}
			if v6 {
				l.UDP = ethHdr + 40
			}
			// The pseudo-header sum, as udp4_hwcsum/udp6_hwcsum_outgoing
			// leave it for the device.
			var s uint64
			if v6 {
				s = vnet.Sum(0, f[ethHdr+8:ethHdr+40])
			} else {
				s = vnet.Sum(0, f[ethHdr+12:ethHdr+20])
			}
			s += uint64(len(f)-l.UDP) + 17
			binary.BigEndian.PutUint16(f[l.UDP+6:], vnet.Fold(s))
			if !finishChecksum(f, l.UDP, 6) {
				t.Fatal("finishChecksum refused good offsets")
			}
			src, dst := addrs(f, v6)
			if u := wire.UDP(f[l.UDP:]); !u.IsChecksumValid(src, dst) || u.Checksum() == 0 {
				t.Fatalf("v6=%v size %d: checksum %#x does not verify", v6, size, u.Checksum())
			}
		}
	}
	f := superFrame(false, make([]byte, 10), 0)
	for _, c := range [][2]int{{0, 6}, {len(f) - 1, 0}, {40, len(f)}} {
		if finishChecksum(f, c[0], c[1]) {
			t.Errorf("finishChecksum(start %d, offset %d) accepted a %d-byte frame", c[0], c[1], len(f))
		}
	}
}

// FuzzGSOSegment feeds arbitrary frames and segment sizes to the GSO
// splitter: it must never panic, and whatever it accepts must come apart
// into segments whose payloads add up to the original.
func FuzzGSOSegment(f *testing.F) {
	f.Add(superFrame(false, make([]byte, 3000), 7), uint16(1052))
	f.Add(superFrame(true, make([]byte, 3000), 0), uint16(1000))
	f.Add(superFrame(false, make([]byte, 10), 0), uint16(1))
	f.Add([]byte{}, uint16(0))
	f.Fuzz(func(t *testing.T, frame []byte, gso uint16) {
		l, err := parseGSO(frame, int(gso))
		if err != nil {
			return
		}
		if l.Segs > 65536 {
			t.Fatalf("%d segments", l.Segs)
		}
		out := make([]byte, l.Payload+int(gso))
		var joined []byte
		for s := range l.Segs {
			n := gsoSegment(frame, &l, int(gso), s, out)
			if n <= l.Payload || n > len(out) {
				t.Fatalf("segment %d: %d bytes", s, n)
			}
			joined = append(joined, out[l.Payload:n]...)
		}
		if !bytes.Equal(joined, frame[l.Payload:]) {
			t.Fatal("segments do not add up to the payload")
		}
	})
}
