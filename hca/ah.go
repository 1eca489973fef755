package hca

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/wire"
)

// AHAttr describes a path (ibv_ah_attr with its GRH). RoCE requires a
// global route: DGID and SGIDIndex always matter.
type AHAttr struct {
	DGID         GID
	SGIDIndex    int
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	SL           uint8
	DLID         uint16
	// DMAC, when set, is used instead of resolving the next hop (Ethernet links).
	DMAC net.HardwareAddr
}

// defaultHopLimit is Linux's default IPv4 TTL and IPv6 hop limit, the
// hop limit a route gives unless configured otherwise.
const defaultHopLimit = 64

// AH is an address handle for UD sends.
type AH struct {
	pd     *PD
	index  uint32
	handle uint32 // index<<8 | an 8-bit generation, as MR keys
	attr   AHAttr
	addr   wire.Addr
}

// Handle returns the value to put in SendWR.AH. Like an MR's keys it
// carries an 8-bit generation, so the handle of a destroyed AH does not
// name the next AH created in its slot.
func (ah *AH) Handle() uint32 { return ah.handle }

// Attr returns the attributes the AH was created with.
func (ah *AH) Attr() AHAttr { return ah.attr }

// CreateAH creates an address handle (ibv_create_ah).
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	d := pd.dev
	a, err := d.pathAddr(&attr)
	if err != nil {
		return nil, err
	}
	if err := pd.ref(); err != nil { // ErrClosed, ErrDestroyed
		return nil, err
	}
	if h := registerHook; h != nil {
		h()
	}
	ah := &AH{pd: pd, attr: attr, addr: a}
	if err := d.ahs.add(ah, d.attr.MaxAH); err != nil {
		pd.unref()
		return nil, err
	}
	if a.Kind == wire.KindRoCEv2IPv4 || a.Kind == wire.KindRoCEv2IPv6 {
		d.prepare(a.DstIP)
	}
	return ah, nil
}

// Destroy destroys the AH. After Device.Close, which destroys every AH of
// the device, it returns ErrDestroyed, as a second Destroy does. Handle
// and Attr keep answering what the AH was created with; the handle names
// no AH any more.
func (ah *AH) Destroy() error {
	if !ah.pd.dev.ahs.remove(ah) {
		return ErrDestroyed
	}
	ah.pd.unref()
	return nil
}

// ahTable maps handles to AHs; lookups take no lock (slotTable): a UD
// QP looks up the AH of every packet it sends.
type ahTable struct {
	slotTable[AH]
}

func (t *ahTable) add(ah *AH, max int) error {
	return t.slotTable.add(ah, max, "max_ah", func(idx uint32, gen uint8) {
		ah.index, ah.handle = idx, idx<<8|uint32(gen)
	})
}

func (t *ahTable) remove(ah *AH) bool { return t.slotTable.remove(ah, ah.index) }

// lookup copies the addressing of handle h into dst.
func (t *ahTable) lookup(h uint32, dst *wire.Addr) bool {
	ah := t.ah(h)
	if ah == nil {
		return false
	}
	*dst = ah.addr
	return true
}

// valid reports whether handle h names an AH (transport.Config.ValidAH).
func (t *ahTable) valid(h uint32) bool { return t.ah(h) != nil }

// ah returns the AH handle h names, or nil.
func (t *ahTable) ah(h uint32) *AH {
	ah := t.get(h >> 8)
	if ah == nil || ah.handle != h {
		return nil
	}
	return ah
}

// pathAddr builds the frame addressing for a path: source from the GID
// table, destination from the DGID, next-hop MAC on Ethernet links. The
// UDP source port is the link's fixed one or a placeholder the QP replaces.
func (d *Device) pathAddr(attr *AHAttr) (wire.Addr, error) {
	var a wire.Addr
	sgid, err := d.QueryGID(attr.SGIDIndex)
	if err != nil {
		return a, err
	}
	if attr.DGID == (GID{}) {
		return a, fmt.Errorf("%w: destination GID is zero (RoCE needs a global route: pass the peer's GID, e.g. pingpong -g)", ErrInvalidArg)
	}
	src, dst := sgid.Addr(), attr.DGID.Addr()
	if src.Is4() != dst.Is4() {
		return a, fmt.Errorf("%w: source GID %s and destination GID %s are of different IP versions", ErrInvalidArg, sgid, attr.DGID)
	}
	if attr.FlowLabel > 0xFFFFF {
		return a, fmt.Errorf("%w: flow label 0x%x exceeds 20 bits", ErrInvalidArg, attr.FlowLabel)
	}
	// The kernel's IB core resolves a RoCE AV through the IP route and
	// replaces its hop limit with the route's (ib_resolve_unicast_gid_dmac),
	// so rxe sends TTL 64 even when ibv_rc_pingpong asks for hop_limit 1
	// (rc_pingpong.pcap). Only a link-local DGID keeps the AV's value. The
	// field is masked in the ICRC either way.
	hop := uint8(defaultHopLimit)
	if dst.Is6() && dst.IsLinkLocalUnicast() && attr.HopLimit != 0 {
		hop = attr.HopLimit
	}
	a = wire.Addr{
		SrcIP: src, DstIP: dst, SGID: sgid, DGID: attr.DGID,
		TrafficClass: attr.TrafficClass, FlowLabel: attr.FlowLabel, HopLimit: hop,
		DontFragment: true, SL: attr.SL, DLID: attr.DLID,
	}
	switch {
	case d.opts.RoCEv1:
		a.Kind = wire.KindRoCEv1
	case src.Is4():
		a.Kind = wire.KindRoCEv2IPv4
	default:
		a.Kind = wire.KindRoCEv2IPv6
		a.UDPChecksum = true // IPv6 requires it; rxe sends 0, which Wireshark flags
	}
	a.SrcPort = d.sport
	if a.SrcPort == 0 {
		a.SrcPort = 0xC000 // replaced per QP by wire.UDPSourcePort at RTR
	}
	if d.format == link.FormatEthernet {
		copy(a.SrcMAC[:], d.mac)
		switch {
		case len(attr.DMAC) == 6:
			copy(a.DstMAC[:], attr.DMAC)
		case d.opts.Resolver != nil:
			mac, err := d.opts.Resolver.Resolve(dst)
			if err != nil {
				return a, fmt.Errorf("%w: next hop for %s: %v", ErrNoRoute, dst, err)
			}
			copy(a.DstMAC[:], mac)
		default:
			return a, fmt.Errorf("%w: no MAC for %s (set AHAttr.DMAC or Options.Resolver)", ErrNoRoute, dst)
		}
	}
	return a, nil
}

// prepare tells a link.Preparer link about RoCEv2 destination dst (an AH's
// or a connected QP's path) before its first frame; nothing for an invalid
// dst or another link.
func (d *Device) prepare(dst netip.Addr) {
	if p, ok := d.ep.(link.Preparer); ok && dst.IsValid() {
		p.Prepare(netip.AddrPortFrom(dst, wire.RoCEv2Port))
	}
}
