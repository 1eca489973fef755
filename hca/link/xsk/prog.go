//go:build linux

package xsk

import (
	"encoding/binary"
	"fmt"
	"net"
)

// eBPF instruction classes, sizes, modes and operations (linux/bpf.h,
// linux/bpf_common.h).
const (
	clsLDX   = 0x01
	clsJMP   = 0x05
	clsJMP32 = 0x06
	clsALU64 = 0x07
	clsLD    = 0x00

	szW  = 0x00
	szH  = 0x08
	szB  = 0x10
	szDW = 0x18

	modeIMM = 0x00
	modeMEM = 0x60

	srcK = 0x00
	srcX = 0x08

	opMOV  = 0xb0
	opADD  = 0x00
	opJA   = 0x00
	opJEQ  = 0x10
	opJNE  = 0x50
	opJSET = 0x40
	opJGT  = 0x20
	opJLE  = 0xb0
	opCALL = 0x80
	opEXIT = 0x90

	pseudoMapFD = 1

	helperRedirectMap = 51 // bpf_redirect_map
	xdpPass           = 2  // XDP_PASS

	// xdp_md field offsets.
	mdData         = 0
	mdDataEnd      = 4
	mdRxQueueIndex = 16
)

// ins is one eBPF instruction; jump is the label it jumps to ("" none).
type ins struct {
	code     uint8
	dst, src uint8
	off      int16
	imm      int32
	jump     string
}

// prog assembles eBPF with labels, so that the jump offsets are computed,
// not counted by hand.
type prog struct {
	ins    []ins
	labels map[string]int
}

func (p *prog) emit(i ins)        { p.ins = append(p.ins, i) }
func (p *prog) label(name string) { p.labels[name] = len(p.ins) }

func (p *prog) ldx(size uint8, dst, src uint8, off int16) {
	p.emit(ins{code: clsLDX | modeMEM | size, dst: dst, src: src, off: off})
}
func (p *prog) movReg(dst, src uint8) { p.emit(ins{code: clsALU64 | opMOV | srcX, dst: dst, src: src}) }
func (p *prog) movImm(dst uint8, imm int32) {
	p.emit(ins{code: clsALU64 | opMOV | srcK, dst: dst, imm: imm})
}
func (p *prog) addImm(dst uint8, imm int32) {
	p.emit(ins{code: clsALU64 | opADD | srcK, dst: dst, imm: imm})
}

// jImm jumps to l when dst op imm, comparing the low 32 bits (JMP32).
func (p *prog) jImm(op uint8, dst uint8, imm int32, l string) {
	p.emit(ins{code: clsJMP32 | op | srcK, dst: dst, imm: imm, jump: l})
}

// jReg jumps to l when dst op src (64-bit: packet pointers).
func (p *prog) jReg(op uint8, dst, src uint8, l string) {
	p.emit(ins{code: clsJMP | op | srcX, dst: dst, src: src, jump: l})
}
func (p *prog) ja(l string) { p.emit(ins{code: clsJMP | opJA, jump: l}) }

// ldMapFD loads a map's file descriptor (a 16-byte instruction).
func (p *prog) ldMapFD(dst uint8, fd int) {
	p.emit(ins{code: clsLD | modeIMM | szDW, dst: dst, src: pseudoMapFD, imm: int32(fd)})
	p.emit(ins{})
}
func (p *prog) call(helper int32) { p.emit(ins{code: clsJMP | opCALL, imm: helper}) }
func (p *prog) exit()             { p.emit(ins{code: clsJMP | opEXIT}) }

// encode resolves the labels and returns the instructions as the kernel
// reads them (struct bpf_insn, 8 bytes each, little-endian on the hosts
// this runs on).
func (p *prog) encode() ([]uint64, error) {
	out := make([]uint64, len(p.ins))
	for i, in := range p.ins {
		off := in.off
		if in.jump != "" {
			t, ok := p.labels[in.jump]
			if !ok {
				return nil, fmt.Errorf("xsk: eBPF label %q undefined", in.jump)
			}
			off = int16(t - i - 1)
		}
		var b [8]byte
		b[0] = in.code
		b[1] = in.dst | in.src<<4
		binary.LittleEndian.PutUint16(b[2:], uint16(off))
		binary.LittleEndian.PutUint32(b[4:], uint32(in.imm))
		out[i] = binary.LittleEndian.Uint64(b[:])
	}
	return out, nil
}

// le16 is the value a 16-bit load of the network-order bytes of v gives
// on a little-endian machine.
func le16(v uint16) int32 { return int32(v>>8 | v<<8) }

// RoCE constants the program matches.
const (
	etherTypeIPv4   = 0x0800
	etherTypeIPv6   = 0x86DD
	etherTypeRoCEv1 = 0x8915
	roceV2Port      = 4791
)

// steerProgram is the XDP program (see doc.go): RoCE frames to mac of at
// most maxFrame bytes go to the socket of their receive queue in the
// XSKMAP mapFD; everything else passes.
//
// Registers: r1 the context until the call, r6 a copy of it, r2 data,
// r3 data_end, r4 a bound being checked, r5 the field being compared.
func steerProgram(mapFD int, mac net.HardwareAddr, maxFrame int) ([]uint64, error) {
	if len(mac) != 6 {
		return nil, fmt.Errorf("xsk: hardware address %q is not Ethernet", mac)
	}
	p := &prog{labels: map[string]int{}}
	p.movReg(6, 1)
	p.ldx(szW, 2, 1, mdData)
	p.ldx(szW, 3, 1, mdDataEnd)
	// The Ethernet header is there, and for us.
	p.movReg(4, 2)
	p.addImm(4, 14)
	p.jReg(opJGT, 4, 3, "pass")
	p.ldx(szW, 5, 2, 0)
	p.jImm(opJNE, 5, int32(binary.LittleEndian.Uint32(mac[0:4])), "pass")
	p.ldx(szH, 5, 2, 4)
	p.jImm(opJNE, 5, int32(binary.LittleEndian.Uint16(mac[4:6])), "pass")
	p.ldx(szH, 5, 2, 12)
	p.jImm(opJEQ, 5, le16(etherTypeRoCEv1), "length")
	p.jImm(opJEQ, 5, le16(etherTypeIPv6), "ipv6")
	p.jImm(opJNE, 5, le16(etherTypeIPv4), "pass")
	// IPv4: no options, not a fragment, UDP to 4791.
	p.movReg(4, 2)
	p.addImm(4, 14+20+8)
	p.jReg(opJGT, 4, 3, "pass")
	p.ldx(szB, 5, 2, 14)
	p.jImm(opJNE, 5, 0x45, "pass")
	p.ldx(szH, 5, 2, 14+6)
	p.jImm(opJSET, 5, le16(0x3FFF), "pass") // MF or a fragment offset
	p.ldx(szB, 5, 2, 14+9)
	p.jImm(opJNE, 5, 17, "pass")
	p.ldx(szH, 5, 2, 14+20+2)
	p.jImm(opJNE, 5, le16(roceV2Port), "pass")
	p.ja("length")
	// IPv6: UDP (no extension header) to 4791.
	p.label("ipv6")
	p.movReg(4, 2)
	p.addImm(4, 14+40+8)
	p.jReg(opJGT, 4, 3, "pass")
	p.ldx(szB, 5, 2, 14+6)
	p.jImm(opJNE, 5, 17, "pass")
	p.ldx(szH, 5, 2, 14+40+2)
	p.jImm(opJNE, 5, le16(roceV2Port), "pass")
	// Longer than a chunk holds: the stack's (a packet socket's) frame.
	p.label("length")
	p.movReg(4, 2)
	p.addImm(4, int32(maxFrame)+1)
	p.jReg(opJLE, 4, 3, "pass")
	p.ldx(szW, 2, 6, mdRxQueueIndex)
	p.ldMapFD(1, mapFD)
	p.movImm(3, xdpPass) // no socket on this queue: pass
	p.call(helperRedirectMap)
	p.exit()
	p.label("pass")
	p.movImm(0, xdpPass)
	p.exit()
	return p.encode()
}
