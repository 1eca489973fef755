// Package pcaptest holds small stdlib-only capture readers for tests that
// must not depend on the project's own pcap package (or on gopacket): the
// out-of-band TCP exchanges of rdma-core's pingpong examples and perftest
// are reassembled from the golden captures.
package pcaptest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// TCPStreams is the reassembled payload of one TCP connection of a
// capture, one byte stream per direction.
type TCPStreams struct {
	Client []byte // client -> server
	Server []byte // server -> client
}

type segment struct {
	seq  uint32
	data []byte
}

// ExtractTCP is a minimal pcap reader for tests: classic libpcap files, Ethernet
// link type, IPv4 or IPv6, TCP. It reassembles both directions of the
// connection to or from port by sequence number (duplicates and
// retransmissions overlap and are merged; a hole is an error).
func ExtractTCP(b []byte, port uint16) (TCPStreams, error) {
	if len(b) < 24 {
		return TCPStreams{}, errors.New("pcap: short global header")
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(b) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		bo = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo = binary.BigEndian
	default:
		return TCPStreams{}, errors.New("pcap: not a classic pcap file")
	}
	if lt := bo.Uint32(b[20:]); lt != 1 {
		return TCPStreams{}, fmt.Errorf("pcap: link type %d, want Ethernet", lt)
	}
	var isn [2]uint32
	var haveISN [2]bool
	var segs [2][]segment
	for off := 24; off+16 <= len(b); {
		incl := int(bo.Uint32(b[off+8:]))
		off += 16
		if off+incl > len(b) {
			return TCPStreams{}, errors.New("pcap: truncated record")
		}
		frame := b[off : off+incl]
		off += incl
		if len(frame) < 14 {
			continue
		}
		etype := binary.BigEndian.Uint16(frame[12:])
		l3 := frame[14:]
		if etype == 0x8100 && len(frame) >= 18 {
			etype = binary.BigEndian.Uint16(frame[16:])
			l3 = frame[18:]
		}
		var tcp []byte
		switch etype {
		case 0x0800:
			if len(l3) < 20 || l3[9] != 6 {
				continue
			}
			ihl := int(l3[0]&0xF) * 4
			tot := int(binary.BigEndian.Uint16(l3[2:]))
			if ihl < 20 || tot < ihl || tot > len(l3) {
				return TCPStreams{}, errors.New("pcap: bad IPv4 header")
			}
			tcp = l3[ihl:tot]
		case 0x86DD:
			if len(l3) < 40 || l3[6] != 6 {
				continue
			}
			pl := int(binary.BigEndian.Uint16(l3[4:]))
			if 40+pl > len(l3) {
				return TCPStreams{}, errors.New("pcap: bad IPv6 header")
			}
			tcp = l3[40 : 40+pl]
		default:
			continue
		}
		if len(tcp) < 20 {
			return TCPStreams{}, errors.New("pcap: short TCP header")
		}
		sport, dport := binary.BigEndian.Uint16(tcp), binary.BigEndian.Uint16(tcp[2:])
		var dir int // 0: client -> server, 1: server -> client
		switch {
		case dport == port:
			dir = 0
		case sport == port:
			dir = 1
		default:
			continue
		}
		seq := binary.BigEndian.Uint32(tcp[4:])
		doff := int(tcp[12]>>4) * 4
		flags := tcp[13]
		if doff < 20 || doff > len(tcp) {
			return TCPStreams{}, errors.New("pcap: bad TCP data offset")
		}
		if flags&0x02 != 0 { // SYN: the first data byte is ISN+1
			isn[dir], haveISN[dir] = seq+1, true
			continue
		}
		if payload := tcp[doff:]; len(payload) > 0 {
			segs[dir] = append(segs[dir], segment{seq, payload})
		}
	}
	var out [2][]byte
	for dir := range segs {
		if len(segs[dir]) == 0 {
			continue
		}
		if !haveISN[dir] {
			return TCPStreams{}, fmt.Errorf("pcap: no SYN seen for direction %d", dir)
		}
		ss := segs[dir]
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].seq-isn[dir] < ss[j].seq-isn[dir] })
		var buf []byte
		for _, sg := range ss {
			rel := int(sg.seq - isn[dir])
			if rel > len(buf) {
				return TCPStreams{}, fmt.Errorf("pcap: hole in direction %d at offset %d", dir, len(buf))
			}
			if end := rel + len(sg.data); end > len(buf) {
				buf = append(buf, sg.data[len(buf)-rel:]...)
			}
		}
		out[dir] = buf
	}
	return TCPStreams{Client: out[0], Server: out[1]}, nil
}
