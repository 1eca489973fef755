package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// roceFrames is the number of RoCEv2 frames per golden capture, from the
// captures' README tables (tshark counts). IPv6 files are not in the tables
// and are checked for at least one frame.
var roceFrames = map[string]int{
	"rc_pingpong": 20, "rc_pingpong_4k": 30, "uc_pingpong": 10, "ud_pingpong": 10,
	"srq_pingpong": 24, "send_bw": 40, "send_bw_8k": 180, "write_bw": 40, "write_bw_8k": 180,
	"read_bw": 40, "read_bw_8k": 180, "atomic_fa": 40, "atomic_cs": 40, "send_lat": 80,
	"write_lat": 80, "rping": 41, "send_bw_rdmacm": 94, "udaddy": 8, "send_bw_8k_loss": 231,
	"rc_pingpong_4k_mtu4096": 30, "send_bw_8k_mtu4096": 60, "write_bw_8k_mtu4096": 60,
	"read_bw_8k_mtu4096": 60,
}

// isRoCEv2 classifies an Ethernet frame by hand, independently of Decode:
// IPv4/IPv6 (optionally VLAN-tagged), UDP, destination port 4791.
func isRoCEv2(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	et, off := binary.BigEndian.Uint16(f[12:]), 14
	if et == 0x8100 {
		et, off = binary.BigEndian.Uint16(f[16:]), 18
	}
	switch et {
	case 0x0800:
		ihl := int(f[off]&0xF) * 4
		return f[off+9] == 17 && binary.BigEndian.Uint16(f[off+ihl+2:]) == 4791
	case 0x86DD:
		return f[off+6] == 17 && binary.BigEndian.Uint16(f[off+42:]) == 4791
	}
	return false
}

type golden struct {
	name    string
	frame   []byte
	framing wire.Framing
}

// goldenPackets returns every RoCE/IB packet of the golden captures and of
// the shared vectors that are present.
func goldenPackets(t testing.TB) []golden {
	t.Helper()
	var out []golden
	for _, path := range goldenCaptures(t) {
		frames, err := readCapture(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			if isRoCEv2(f.data) {
				out = append(out, golden{name: filepath.Base(path) + "#" + itoa(f.n), frame: f.data, framing: wire.FramingEthernet})
			}
		}
	}
	// The shared vectors, when present (read in place, never copied).
	if path := findSharedVector("real_hw_vectors.pcap"); path != "" {
		frames, err := readCapture(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			out = append(out, golden{name: "real_hw_vectors#" + itoa(f.n), frame: f.data, framing: wire.FramingEthernet})
		}
	}
	if path := findSharedVector("wireshark_sample_infiniband_erf.pcap"); path != "" {
		frames, err := readCapture(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			if ib := erfInfiniBand(f.data); ib != nil {
				out = append(out, golden{name: "erf#" + itoa(f.n), frame: ib, framing: wire.FramingIB})
			}
		}
	}
	return out
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// rebuild runs Finish over a fresh buffer holding only p.Transport(), from
// p.Addr(), and returns the frame.
func rebuild(t testing.TB, p *wire.Packet, f wire.Framing) []byte {
	t.Helper()
	a := p.Addr()
	tr := p.Transport()
	hr := a.Headroom(f)
	buf := make([]byte, hr+len(tr)+wire.Tailroom+7)
	copy(buf[hr:], tr)
	out, err := wire.Finish(buf, hr, len(tr), f, &a)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return out
}

func TestGoldenCaptures(t *testing.T) {
	total := 0
	for _, path := range goldenCaptures(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".pcap")
		t.Run(name, func(t *testing.T) {
			frames, err := readCapture(path)
			if err != nil {
				t.Fatal(err)
			}
			var p wire.Packet
			n := 0
			for _, f := range frames {
				if f.linkType != linkEthernet {
					t.Fatalf("frame %d: link type %d", f.n, f.linkType)
				}
				err := p.Decode(f.data, wire.FramingEthernet)
				if !isRoCEv2(f.data) {
					if err != wire.ErrNotRoCE {
						t.Errorf("frame %d (not RoCE): Decode = %v, want ErrNotRoCE", f.n, err)
					}
					continue
				}
				n++
				if err != nil {
					t.Errorf("frame %d: Decode: %v (%v)", f.n, err, wire.Explain(f.data, wire.FramingEthernet))
					continue
				}
				checkGolden(t, f.n, &p, f.data)
			}
			if want, ok := roceFrames[name]; ok && n != want {
				t.Errorf("%d RoCE frames, README says %d", n, want)
			}
			if n == 0 {
				t.Errorf("no RoCE frames")
			}
			total += n
		})
	}
	t.Logf("%d golden RoCEv2 frames decoded, ICRC-verified and rebuilt byte for byte", total)
}

func checkGolden(t *testing.T, n int, p *wire.Packet, frame []byte) {
	t.Helper()
	if !p.ICRCChecked || wire.ICRC(frame, p) != p.ICRC() {
		t.Errorf("frame %d: ICRC not checked or wrong", n)
	}
	// rxe's IP header: DF, TTL 64, TOS 0, UDP checksum 0, source port in
	// the 0xC000 range (wire-spec §14).
	a := p.Addr()
	if a.UDPChecksum || a.HopLimit != 64 || a.TrafficClass != 0 || a.SrcPort < 0xC000 {
		t.Errorf("frame %d: unexpected rxe addressing %+v", n, a)
	}
	if a.Kind == wire.KindRoCEv2IPv4 && !a.DontFragment {
		t.Errorf("frame %d: rxe IPv4 without DF", n)
	}
	if p.BTH().TVer() != 0 || p.BTH().PKey() != bth.DefaultPKey {
		t.Errorf("frame %d: TVer %d PKey %#x", n, p.BTH().TVer(), p.BTH().PKey())
	}
	if got := rebuild(t, p, wire.FramingEthernet); !bytes.Equal(got, frame[:p.End]) {
		t.Errorf("frame %d: rebuilt frame differs\n got %x\nwant %x", n, got, frame[:p.End])
	}
	for i, b := range frame[p.End:] {
		if b != 0 {
			t.Errorf("frame %d: non-zero byte after End at %d (Ethernet padding must be zero)", n, p.End+i)
			break
		}
	}
	// The same packet seen by a TUN device or the UDP-socket link (IP first).
	ip := frame[p.IPOff:p.End]
	var q wire.Packet
	if err := q.Decode(ip, wire.FramingIP); err != nil {
		t.Errorf("frame %d: FramingIP: %v", n, err)
	} else if got := rebuild(t, &q, wire.FramingIP); !bytes.Equal(got, ip) {
		t.Errorf("frame %d: FramingIP rebuild differs", n)
	}
	// And as a UDP socket payload: BTH..ICRC; Finish over the virtual IP
	// header reproduces the ICRC.
	var r wire.Packet
	udpPayload := frame[p.BTHOff:p.End]
	if err := r.Decode(udpPayload, wire.FramingBTH); err != nil || r.ICRCChecked {
		t.Errorf("frame %d: FramingBTH: %v checked=%v", n, err, r.ICRCChecked)
	} else {
		buf := append([]byte(nil), udpPayload...)
		out, err := wire.Finish(buf, 0, len(buf)-4, wire.FramingBTH, &a)
		if err != nil || !bytes.Equal(out, udpPayload) {
			t.Errorf("frame %d: FramingBTH Finish: %v", n, err)
		}
	}
}

func TestGoldenNotRoCE(t *testing.T) {
	// Every non-RoCE frame kind in the captures: ARP, TCP 18515 (IPv4),
	// and whatever IPv6 control traffic is there.
	seen := map[string]bool{}
	var p wire.Packet
	for _, path := range goldenCaptures(t) {
		frames, _ := readCapture(path)
		for _, f := range frames {
			if isRoCEv2(f.data) {
				continue
			}
			et := binary.BigEndian.Uint16(f.data[12:])
			kind := "ethertype-" + itoa(int(et))
			if et == 0x0800 {
				kind = "ipv4-proto-" + itoa(int(f.data[23]))
			} else if et == 0x86DD {
				kind = "ipv6-nh-" + itoa(int(f.data[20]))
			}
			seen[kind] = true
			if err := p.Decode(f.data, wire.FramingEthernet); !errors.Is(err, wire.ErrNotRoCE) {
				t.Errorf("%s #%d (%s): %v", filepath.Base(path), f.n, kind, err)
			}
		}
	}
	for _, k := range []string{"ethertype-2054", "ipv4-proto-6"} { // ARP, TCP
		if !seen[k] {
			t.Errorf("captures hold no %s frame", k)
		}
	}
	t.Logf("non-RoCE kinds seen: %v", seen)
}
