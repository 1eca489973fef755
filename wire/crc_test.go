package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	s = strings.Join(strings.Fields(s), "")
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex: %v", err)
	}
	return b
}

// refICRC is the reference check of wire-spec §5.6, written the obvious way
// (masked copy of the whole packet, one crc32.ChecksumIEEE) as an oracle
// independent of the package's in-place computation. ip is IP header ..
// ICRC of a RoCEv2 packet.
func refICRC(ip []byte) uint32 {
	var m []byte
	if ip[0]>>4 == 4 {
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		m = append([]byte(nil), ip[:tot-4]...)
		m[1], m[8], m[10], m[11] = 0xff, 0xff, 0xff, 0xff // TOS, TTL, IP csum
		m[26], m[27] = 0xff, 0xff                         // UDP csum
		m[32] = 0xff                                      // BTH byte 4
	} else {
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		m = append([]byte(nil), ip[:40+plen-4]...)
		m[0] |= 0x0f
		m[1], m[2], m[3], m[7] = 0xff, 0xff, 0xff, 0xff // TC+FL, hop limit
		m[46], m[47] = 0xff, 0xff
		m[52] = 0xff
	}
	return crc32.ChecksumIEEE(append(bytes.Repeat([]byte{0xff}, 8), m...))
}

func TestCheckValues(t *testing.T) {
	if got := crc32.ChecksumIEEE([]byte("123456789")); got != 0xCBF43926 {
		t.Errorf("crc32(123456789) = %#x", got)
	}
	if got := wire.CRC16IB([]byte("123456789")); got != 0x0A3D {
		t.Errorf("CRC16IB(123456789) = %#04x, want 0x0A3D", got)
	}
	// rxe seeds crc32_le with 0xDEBB20E3: the raw register after 8 × 0xFF.
	if got := crc32.ChecksumIEEE(bytes.Repeat([]byte{0xff}, 8)); got != ^uint32(0xDEBB20E3) {
		t.Errorf("crc32(ff*8) = %#x, want ^0xDEBB20E3", got)
	}
	// CRC16IB against a bitwise implementation on lengths 0..40 (exercises
	// the slicing-by-8 loop and its tail).
	data := make([]byte, 40)
	for i := range data {
		data[i] = byte(i*37 + 11)
	}
	for n := range len(data) + 1 {
		c := uint16(0xFFFF)
		for _, b := range data[:n] {
			c ^= uint16(b)
			for range 8 {
				if c&1 != 0 {
					c = c>>1 ^ 0xD008
				} else {
					c >>= 1
				}
			}
		}
		if got := wire.CRC16IB(data[:n]); got != c^0xFFFF {
			t.Errorf("CRC16IB(len %d) = %#x, want %#x", n, got, c^0xFFFF)
		}
	}
}

// The worked examples of wire-spec §5.3–5.5.
func TestWorkedExamples(t *testing.T) {
	tests := []struct {
		name    string
		framing wire.Framing
		frame   string
		input   string // the ICRC input the spec prints ("" = not printed)
		icrc    uint32 // zlib.crc32 value; wire bytes are its little-endian form
		kind    wire.Kind
		opcode  bth.Opcode
	}{
		{
			name:    "5.3 ConnectX-4 Lx CNP",
			framing: wire.FramingEthernet,
			frame: `e41d2dab2bc2 7cfe90643b32 0800
				45c2003c 718c4000 4011 9161 0a001101 0a001201
				0000 12b7 0028 0000
				81 00 ffff 40000118 00000000
				00000000000000000000000000000000
				82fd002a`,
			input: `ffffffffffffffff 45ff003c718c4000ff11ffff0a0011010a001201 000012b70028ffff
				8100ffffff000118 00000000 00000000000000000000000000000000`,
			icrc: 0x2a00fd82, kind: wire.KindRoCEv2IPv4, opcode: bth.OpCNP,
		},
		{
			name:    "5.4 rxe RC RDMA READ REQUEST",
			framing: wire.FramingEthernet,
			frame: `000c29ae1ca4 000c2989a2e5 0800
				4500003c be104000 4011 8a4b c0a83881 c0a83883
				df94 12b7 0028 0000
				0c 00 ffff 00000011 80 54cb63
				00007fee260fb000 000002b8 00010000
				08c6154a`,
			input: `ffffffffffffffff 45ff003cbe104000ff11ffffc0a83881c0a83883 df9412b70028ffff
				0c00ffffff000011 8054cb63 00007fee260fb000000002b800010000`,
			icrc: 0x4a15c608, kind: wire.KindRoCEv2IPv4, opcode: bth.OpRCRDMAReadRequest,
		},
		{
			name:    "5.5 native IB RC ACK",
			framing: wire.FramingIB,
			frame:   `00 02 0004 0007 0001  11 40 ffff 00870408 00d40a55  1f 000001  a8035550  3081`,
			input:   `f0 02 0004 0007 0001 | 11 40 ffff ff870408 00d40a55 | 1f000001`,
			icrc:    0x505503a8, kind: wire.KindIB, opcode: bth.OpRCAcknowledge,
		},
		{
			name:    "5.5 RoCEv1 RC ACK (ConnectX)",
			framing: wire.FramingEthernet,
			frame: `7cfe90753cd8 7cfe90753cd8 8915
				60200000 0014 1b40 00000000000000000000ffff0f000002 00000000000000000000ffff0f000002
				1140ffff 00000109 00a788c0 00000005 25f0c038`,
			input: `ffffffffffffffff 6fffffff 0014 1bff 00000000000000000000ffff0f000002 00000000000000000000ffff0f000002
				1140ffff ff000109 00a788c0 00000005`,
			icrc: 0x38c0f025, kind: wire.KindRoCEv1, opcode: bth.OpRCAcknowledge,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frame := unhex(t, tc.frame)
			in := unhex(t, strings.ReplaceAll(tc.input, "|", ""))
			if got := crc32.ChecksumIEEE(in); got != tc.icrc {
				t.Fatalf("crc32 of the spec's ICRC input = %#x, want %#x", got, tc.icrc)
			}
			var p wire.Packet
			if err := p.Decode(frame, tc.framing); err != nil {
				t.Fatalf("Decode: %v", wire.Explain(frame, tc.framing))
			}
			if p.Kind != tc.kind || p.Opcode != tc.opcode {
				t.Errorf("kind %v opcode %v, want %v %v", p.Kind, p.Opcode, tc.kind, tc.opcode)
			}
			if p.ICRC() != tc.icrc || wire.ICRC(frame, &p) != tc.icrc {
				t.Errorf("ICRC wire %#x computed %#x, want %#x", p.ICRC(), wire.ICRC(frame, &p), tc.icrc)
			}
			if got := rebuild(t, &p, tc.framing); !bytes.Equal(got, frame) {
				t.Errorf("rebuild:\n got %x\nwant %x", got, frame)
			}
		})
	}
}

func TestWorkedExampleIBFields(t *testing.T) {
	frame := unhex(t, `00 02 0004 0007 0001  11 40 ffff 00870408 00d40a55  1f 000001  a8035550  3081`)
	var p wire.Packet
	if err := p.Decode(frame, wire.FramingIB); err != nil {
		t.Fatal(err)
	}
	if p.VCRC() != 0x8130 || p.VCRCOff != 28 || p.End != 30 || p.ICRCOff != 24 {
		t.Errorf("VCRC %#x VCRCOff %d End %d ICRCOff %d", p.VCRC(), p.VCRCOff, p.End, p.ICRCOff)
	}
	if p.DestQP != 0x870408 || p.PSN != 0xd40a55 || !p.BTH().MigReq() {
		t.Errorf("BTH fields %v %v", p.DestQP, p.PSN)
	}
	if a := p.AETH(); a == nil || a.Syndrome() != bth.SyndromeACKUnlimited || a.MSN() != 1 {
		t.Errorf("AETH %x", a)
	}
	a := p.Addr()
	if a.DLID != 4 || a.SLID != 1 || a.VL != 0 {
		t.Errorf("Addr %+v", a)
	}
}

// Every golden RoCEv2 packet: the package's in-place ICRC equals the §5.6
// reference computed over a masked copy.
func TestICRCMatchesReference(t *testing.T) {
	var p wire.Packet
	for _, g := range goldenPackets(t) {
		if err := p.Decode(g.frame, g.framing); err != nil {
			t.Fatalf("%s: %v", g.name, err)
		}
		if p.Kind != wire.KindRoCEv2IPv4 && p.Kind != wire.KindRoCEv2IPv6 {
			continue
		}
		ip := g.frame[p.IPOff:p.End]
		if got, want := wire.ICRC(g.frame, &p), refICRC(ip); got != want {
			t.Errorf("%s: ICRC %#x, reference %#x", g.name, got, want)
		}
	}
}
