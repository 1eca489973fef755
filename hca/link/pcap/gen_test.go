package pcap

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/wire"
)

// wantOpcodes lists the opcodes a generated capture of kind k must hold.
func wantOpcodes(k wire.Kind, rd bool) map[bth.Opcode]bool {
	want := map[bth.Opcode]bool{}
	for _, op := range bth.Opcodes() {
		switch op.Transport() {
		case bth.TransportRC, bth.TransportUC, bth.TransportUD:
			want[op] = true
		case bth.TransportCNP:
			want[op] = k == wire.KindRoCEv2IPv4 || k == wire.KindRoCEv2IPv6
		case bth.TransportRD:
			want[op] = rd && (k == wire.KindIB || k == wire.KindIBGRH)
		}
	}
	return want
}

func TestGenerateCoverage(t *testing.T) {
	for _, rd := range []bool{false, true} {
		caps, err := Generate(GenOptions{Seed: 1, RD: rd})
		if err != nil {
			t.Fatal(err)
		}
		if len(caps) != 5 {
			t.Fatalf("%d captures", len(caps))
		}
		for _, c := range caps {
			seen := map[bth.Opcode]bool{}
			for _, p := range c.Packets {
				seen[p.Opcode] = true
			}
			for op, want := range wantOpcodes(c.Kind, rd) {
				if seen[op] != want {
					t.Errorf("%s (rd=%v): %v present=%v, want %v", c.Name, rd, op, seen[op], want)
				}
			}
		}
	}
}

// Every packet must obey the rules a real responder checks (wire-spec §4.2,
// rxe_resp.c check_length) and carry realistic values.
func TestGenerateRealism(t *testing.T) {
	caps, err := Generate(GenOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caps {
		syndromes := map[bth.AckType]int{}
		naks := map[bth.NAKCode]bool{}
		for i, gp := range c.Packets {
			var p wire.Packet
			if err := p.Decode(gp.Frame, c.Framing); err != nil {
				t.Fatalf("%s #%d %v: %v", c.Name, i+1, gp.Opcode, wire.Explain(gp.Frame, c.Framing))
			}
			if p.Kind != c.Kind || p.Opcode != gp.Opcode || p.PSN != gp.PSN || p.DestQP != gp.DestQP {
				t.Fatalf("%s #%d: decoded %v %v %v %v", c.Name, i+1, p.Kind, p.Opcode, p.PSN, p.DestQP)
			}
			info := p.Info
			switch {
			case info.Has(bth.FlagFirst) && !info.Has(bth.FlagLast), info.Has(bth.FlagMiddle):
				if p.PayloadLen != GenPMTU {
					t.Errorf("%s #%d %v: payload %d, want PMTU %d", c.Name, i+1, p.Opcode, p.PayloadLen, GenPMTU)
				}
			case info.Has(bth.FlagLast) && info.Has(bth.FlagPayload) && !info.Has(bth.FlagFirst):
				if p.PayloadLen < 1 || p.PayloadLen > GenPMTU {
					t.Errorf("%s #%d %v: payload %d", c.Name, i+1, p.Opcode, p.PayloadLen)
				}
			default:
				if p.PayloadLen > GenPMTU {
					t.Errorf("%s #%d %v: payload %d > PMTU", c.Name, i+1, p.Opcode, p.PayloadLen)
				}
			}
			if p.Opcode == bth.OpRCAtomicWrite && p.PayloadLen != 8 {
				t.Errorf("ATOMIC_WRITE payload %d", p.PayloadLen)
			}
			if p.PadCnt != -p.PayloadLen&3 {
				t.Errorf("%s #%d: pad %d for payload %d", c.Name, i+1, p.PadCnt, p.PayloadLen)
			}
			h := p.BTH()
			if h.PKey() != bth.DefaultPKey || h.TVer() != 0 {
				t.Errorf("%s #%d: P_Key %x TVer %d", c.Name, i+1, h.PKey(), h.TVer())
			}
			if p.Opcode == bth.OpCNP {
				if !h.BECN() || p.PSN != 0 {
					t.Errorf("CNP without BECN or with PSN %v", p.PSN)
				}
			} else if p.DestQP < 0x11 {
				t.Errorf("%s #%d: QPN %v below rxe's first 0x11", c.Name, i+1, p.DestQP)
			}
			if info.AETH != 0 {
				s := p.AETH().Syndrome()
				syndromes[s.Type()]++
				if s.Type() == bth.AckTypeNAK {
					naks[s.NAKCode()] = true
				}
			}
			if info.AtomicETH != 0 && p.AtomicETH().VA()%8 != 0 {
				t.Errorf("atomic VA %x not 8-byte aligned", p.AtomicETH().VA())
			}
			if info.RETH != 0 && p.RETH().RKey()&0xFFFFFF00 == 0 {
				t.Errorf("R_Key %x does not look like index<<8|key", p.RETH().RKey())
			}
			if p.EthOff >= 0 {
				eth := gp.Frame[p.EthOff:]
				if eth[0]&0x03 != 0x02 || eth[6]&0x03 != 0x02 {
					t.Errorf("%s #%d: MACs not locally administered unicast", c.Name, i+1)
				}
			}
			if c.Kind == wire.KindRoCEv2IPv6 {
				checkUDPv6(t, gp.Frame[p.IPOff:])
			}
		}
		if syndromes[bth.AckTypeACK] == 0 || syndromes[bth.AckTypeRNRNAK] == 0 ||
			!naks[bth.NAKPSNSequenceError] || !naks[bth.NAKInvalidRequest] ||
			!naks[bth.NAKRemoteAccessError] || !naks[bth.NAKRemoteOperational] {
			t.Errorf("%s: syndromes %v NAKs %v", c.Name, syndromes, naks)
		}
	}
}

// checkUDPv6 verifies the UDP checksum of an IPv6 packet (RFC 8200 8.1).
func checkUDPv6(t *testing.T, ip []byte) {
	t.Helper()
	plen := int(binary.BigEndian.Uint16(ip[4:]))
	udp := ip[40 : 40+plen]
	if binary.BigEndian.Uint16(udp[6:]) == 0 {
		t.Fatal("zero UDP checksum over IPv6")
	}
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(ip[8:40])
	sum += uint32(plen) + 17
	add(udp)
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	if sum != 0xFFFF {
		t.Fatalf("UDP checksum does not verify (sum %04x)", sum)
	}
}

func TestGenerateDeterministic(t *testing.T) {
	a, err := Generate(GenOptions{Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(GenOptions{Seed: 42})
	c, _ := Generate(GenOptions{Seed: 43})
	var fa, fb, fc bytes.Buffer
	for i := range a {
		_, _ = a[i].WriteTo(&fa)
		_, _ = b[i].WriteTo(&fb)
		_, _ = c[i].WriteTo(&fc)
	}
	if !bytes.Equal(fa.Bytes(), fb.Bytes()) {
		t.Fatal("same seed, different bytes")
	}
	if bytes.Equal(fa.Bytes(), fc.Bytes()) {
		t.Fatal("different seeds, same bytes")
	}
}

// The generated frames decode through the gopacket layers too.
func TestGenerateLayers(t *testing.T) {
	caps, err := Generate(GenOptions{Seed: 3, RD: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range caps {
		first := gopacket.Decoder(layers.LayerTypeEthernet)
		if c.Framing == wire.FramingIB {
			first = LayerTypeLRH
		}
		for i, gp := range c.Packets {
			var p wire.Packet
			if err := p.Decode(gp.Frame, c.Framing); err != nil {
				t.Fatal(err)
			}
			f := Frame{Index: i + 1, Data: gp.Frame, WireLen: len(gp.Frame)}
			checkLayers(t, c.Name, &f, first, &p)
		}
	}
}
