package afpacket

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Ethernet-frame offsets the filter reads (untagged frames).
const (
	offEtherType = 12
	offIPv4      = 14
	offIPv4Proto = offIPv4 + 9
	offIPv4Frag  = offIPv4 + 6
	offIPv4Dst   = offIPv4 + 16
	offIPv6      = 14
	offIPv6Next  = offIPv6 + 6
	offIPv6Dst   = offIPv6 + 24
	offUDP6Dport = offIPv6 + 40 + 2

	etherTypeIPv4   = 0x0800
	etherTypeIPv6   = 0x86DD
	etherTypeRoCEv1 = 0x8915
	roceV2Port      = 4791

	// skfAdPkttype is SKF_AD_OFF + SKF_AD_PKTTYPE: loads skb->pkt_type.
	skfAdPkttype = 0xFFFFF000 + 4

	// maxFilterAddrs bounds the addresses per family so every jump fits
	// the 8-bit BPF offsets.
	maxFilterAddrs = 16
)

// insn is a BPF instruction whose jump targets are labels ("" falls
// through).
type insn struct {
	f      unix.SockFilter
	jt, jf string
}

type asm struct {
	ins    []insn
	labels map[string]int
}

func (a *asm) mark(l string) { a.labels[l] = len(a.ins) }
func (a *asm) op(code uint16, k uint32) {
	a.ins = append(a.ins, insn{f: unix.SockFilter{Code: code, K: k}})
}
func (a *asm) jeq(k uint32, jt, jf string)  { a.jmp(unix.BPF_JEQ, k, jt, jf) }
func (a *asm) jset(k uint32, jt, jf string) { a.jmp(unix.BPF_JSET, k, jt, jf) }
func (a *asm) jmp(c uint16, k uint32, t, f string) {
	a.ins = append(a.ins, insn{f: unix.SockFilter{Code: unix.BPF_JMP | c | unix.BPF_K, K: k}, jt: t, jf: f})
}

func (a *asm) assemble() ([]unix.SockFilter, error) {
	out := make([]unix.SockFilter, len(a.ins))
	for i, in := range a.ins {
		out[i] = in.f
		for _, j := range []struct {
			l string
			p *uint8
		}{{in.jt, &out[i].Jt}, {in.jf, &out[i].Jf}} {
			if j.l == "" {
				continue
			}
			at, ok := a.labels[j.l]
			if !ok {
				return nil, fmt.Errorf("afpacket: bpf label %q undefined", j.l)
			}
			d := at - (i + 1)
			if d < 0 || d > 255 {
				return nil, fmt.Errorf("afpacket: bpf jump to %q out of range (%d)", j.l, d)
			}
			*j.p = uint8(d)
		}
	}
	return out, nil
}

// roceFilter builds the receive filter: RoCEv1 frames, and RoCEv2 frames
// to one of addrs, that were sent to this host.
func roceFilter(addrs []netip.Addr) ([]unix.SockFilter, error) {
	var v4, v6 []netip.Addr
	for _, ad := range addrs {
		if ad = ad.Unmap(); ad.Is4() {
			v4 = append(v4, ad)
		} else if ad.Is6() {
			v6 = append(v6, ad)
		}
	}
	if len(v4) > maxFilterAddrs || len(v6) > maxFilterAddrs {
		return nil, fmt.Errorf("afpacket: more than %d addresses of one family on the interface", maxFilterAddrs)
	}
	const (
		ldB   = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
		ldH   = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
		ldW   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		ldHI  = unix.BPF_LD | unix.BPF_H | unix.BPF_IND
		ldxMS = unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH
		ret   = unix.BPF_RET | unix.BPF_K
	)
	a := &asm{labels: map[string]int{}}
	a.op(ldB, skfAdPkttype)
	a.jeq(unix.PACKET_OTHERHOST, "reject", "")
	a.jeq(unix.PACKET_OUTGOING, "reject", "")
	a.op(ldH, offEtherType)
	a.jeq(etherTypeRoCEv1, "accept", "")
	a.jeq(etherTypeIPv4, "ipv4", "")
	a.jeq(etherTypeIPv6, "ipv6", "reject")

	a.mark("ipv4")
	if len(v4) == 0 {
		a.op(ret, 0)
	} else {
		a.op(ldB, offIPv4Proto)
		a.jeq(unix.IPPROTO_UDP, "", "reject")
		a.op(ldH, offIPv4Frag)
		a.jset(0x3FFF, "reject", "") // MF or an offset: a fragment
		a.op(ldxMS, offIPv4)         // X = IHL*4
		a.op(ldHI, offIPv4+2)        // UDP destination port
		a.jeq(roceV2Port, "", "reject")
		a.op(ldW, offIPv4Dst)
		for i, ad := range v4 {
			b := ad.As4()
			next := "reject"
			if i < len(v4)-1 {
				next = ""
			}
			a.jeq(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]), "accept", next)
		}
	}

	a.mark("ipv6")
	if len(v6) == 0 {
		a.op(ret, 0)
	} else {
		a.op(ldB, offIPv6Next)
		a.jeq(unix.IPPROTO_UDP, "", "reject")
		a.op(ldH, offUDP6Dport)
		a.jeq(roceV2Port, "", "reject")
		for i, ad := range v6 {
			b := ad.As16()
			next := "reject"
			if i < len(v6)-1 {
				next = fmt.Sprintf("v6addr%d", i+1)
			}
			a.mark(fmt.Sprintf("v6addr%d", i))
			for w := range 4 {
				a.op(ldW, uint32(offIPv6Dst+4*w))
				t := ""
				if w == 3 {
					t = "accept"
				}
				a.jeq(uint32(b[4*w])<<24|uint32(b[4*w+1])<<16|uint32(b[4*w+2])<<8|uint32(b[4*w+3]), t, next)
			}
		}
	}
	a.mark("accept")
	a.op(ret, 0xFFFFFFFF)
	a.mark("reject")
	a.op(ret, 0)
	return a.assemble()
}

func dropAll() []unix.SockFilter {
	return []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
}

func attachFilter(fd int, prog []unix.SockFilter) error {
	p := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &p)
}
