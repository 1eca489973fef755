package hca

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/transport"
	"github.com/goroce/goroce/wire"
)

// GID is a 16-byte global identifier. RoCEv2 GIDs are IPv6 addresses, with
// IPv4 addresses in the IPv4-mapped form ::ffff:a.b.c.d.
type GID [16]byte

// String formats g like an IPv6 address, as show_gids does.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// Addr returns the IP address the GID stands for (unmapped for IPv4).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// GIDEntry is one entry of the port's GID table.
type GIDEntry struct {
	Index int
	GID   GID
	Type  string // "RoCE v2" (rxe is RoCEv2 only) or "RoCE v1"
}

// DeviceAttr holds ibv_query_device attributes.
type DeviceAttr struct {
	FWVer           string
	NodeGUID        uint64
	SysImageGUID    uint64
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         int
	MaxSGE          int
	MaxSGERd        int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	MaxResRdAtom    int
	AtomicCap       string // "ATOMIC_HCA"
	MaxAH           int
	MaxSRQ          int
	MaxSRQWR        int
	MaxSRQSGE       int
	MaxInlineData   int
	MaxMsgSize      uint32
	PhysPortCnt     int
	MaxPKeys        int
	LocalCAAckDelay int
}

// PortAttr holds ibv_query_port attributes.
type PortAttr struct {
	State       string // PORT_ACTIVE or PORT_DOWN
	MaxMTU      bth.MTU
	ActiveMTU   bth.MTU
	GIDTblLen   int
	PKeyTblLen  int
	LID, SMLID  uint16
	LMC         uint8
	LinkLayer   string // Ethernet or InfiniBand
	MaxMsgSize  uint32
	ActiveSpeed string
	ActiveWidth string
	PhysState   string
}

// Counters are device-wide counters, all updated atomically.
type Counters struct {
	RxFrames, TxFrames atomic.Uint64
	RxBytes, TxBytes   atomic.Uint64
	RxICRCErrors       atomic.Uint64
	RxVCRCErrors       atomic.Uint64
	RxMalformed        atomic.Uint64
	RxNotRoCE          atomic.Uint64
	RxUnknownQP        atomic.Uint64
	RxWrongAddress     atomic.Uint64
	RxUnsupportedQP    atomic.Uint64
	TxErrors           atomic.Uint64
	TxNoRoute          atomic.Uint64
	// RxInline counts the frames an in-process peer's goroutine received
	// for this device right after sending them (Options.NoInlinePeers).
	RxInline atomic.Uint64
}

// Options configure Open.
type Options struct {
	// Name is the device name (hca_id); default "goroce0".
	Name string
	// Kind is the encapsulation on an Ethernet link: wire.KindRoCEv2IPv4
	// (default; IPv6 addresses use RoCEv2 over IPv6 automatically) or
	// wire.KindRoCEv1. Ignored on IP links (always RoCEv2).
	RoCEv1 bool
	// Logger receives setup and error messages, never per-packet logs.
	Logger *slog.Logger
	// Resolver finds the next-hop MAC for a destination on Ethernet links.
	Resolver Resolver
	// UDPSourcePort, when non-zero, is put in every RoCEv2 packet instead
	// of the per-QP rdma_get_udp_sport value (links whose kernel socket
	// fixes the source port provide it; see link.SourcePorter).
	UDPSourcePort uint16
	// Shards is how many transmit shards the device runs. QPs are spread
	// over them by QPN; each has its own lock, worker goroutine and link
	// writer, so QPs on different shards build and send packets on
	// different cores. 0 picks min(GOMAXPROCS, 4); devices whose peers
	// are other devices of the same process do better with PeerShards.
	// Links that cannot transmit from several goroutines (no
	// link.TxQueuer, e.g. a pcap tap, whose capture keeps the wire's
	// order) always get one.
	Shards int
	// BusyPoll makes CQ.Poll on an empty CQ receive and process whatever
	// the link has queued, in the caller's goroutine (one non-blocking
	// receive per link queue, on links that implement link.Poller), before
	// it reports nothing. An application that spins on Poll, as perftest
	// spins on ibv_poll_cq, then needs no goroutine wake-up per message:
	// the difference between ~20 and ~200 µs per message on a virtual
	// machine. Poll reads only the receive queues of the CQ's QPs.
	//
	// What a polled packet makes a QP send (the ACK of a received SEND,
	// requests an ACK let through) is deferred until the application's
	// next PostSend, Poll or Wait on any busy-polling device of the
	// process, so that the ACK and the application's answer to the message
	// leave in one sendmmsg after the completion was handed over (rxe,
	// too, completes a receive before it acknowledges it); if none comes,
	// a timer sends it within 2 ms.
	//
	// It costs a system call per empty Poll, and the device's reader
	// goroutines stand aside while Poll is being called (they take over
	// again within 2 ms of the last Poll, so a CQ.Wait right after
	// spinning may see its completion that much later); leave it off for
	// applications that block in CQ.Wait. While the process has more
	// busy-polling devices than Ps (GOMAXPROCS), an empty Poll also
	// yields the P (runtime.Gosched), so that the goroutine spinning on
	// another of them gets to run before the scheduler preempts this one.
	BusyPoll bool
	// NoInlinePeers turns off the inline receive of in-process peers: by
	// default, when a QP's peer is another device of this process, the
	// goroutine that sent to it goes on to receive and process what the
	// peer's receive queue holds (and what that makes the peer send), as
	// Linux's loopback runs the receive in the sender's context
	// (hca/inline.go). It matters only for connected QPs whose DGID is a
	// GID of another device of this process, and applies only while both
	// devices leave it on. Busy-polling devices (BusyPoll) never take
	// part: their poller receives.
	NoInlinePeers bool
}

// BusyPolling reports whether CQ.Poll receives from the link itself
// (Options.BusyPoll on a link that can be read without blocking), so that
// spinning on Poll makes progress without any other goroutine.
func (d *Device) BusyPolling() bool {
	if !d.opts.BusyPoll {
		return false
	}
	for _, r := range d.rt.readers {
		if r.poller != nil {
			return true
		}
	}
	return false
}

// Resolver resolves the link-layer address of a next hop (an Ethernet link
// uses the kernel's routes and neighbour table).
type Resolver interface {
	Resolve(dst netip.Addr) (net.HardwareAddr, error)
}

// Device is an open software HCA with one port.
type Device struct {
	name   string
	ep     link.Endpoint
	opts   Options
	log    *slog.Logger
	attr   DeviceAttr
	port   PortAttr
	gids   []GIDEntry
	mac    net.HardwareAddr
	epoch  time.Time
	sport  uint16
	kind4  wire.Kind // kind used for IPv4 destinations
	format link.Format

	// Counters are the device counters.
	Counters Counters

	// evMu orders raise against Close, which closes the event channel: a
	// Modify racing Close may still raise SQ_DRAINED.
	evMu     sync.Mutex
	evClosed bool
	// closeDone is closed when the first Close has finished: a second
	// Close waits for it, so that after any Close returns the link is
	// closed and every object destroyed.
	closeDone chan struct{}

	mu      sync.Mutex // protects the object tables below and closed
	closed  bool
	nextPD  uint32
	pds     map[uint32]*PD
	cqs     map[*CQ]struct{}
	srqs    map[*SRQ]struct{}
	nextQPN uint32
	nQP     int
	ahs     ahTable
	mrs     mrTable
	qps     qpTable

	// sendMu protects senders: the RC QPs in RTS or SQD, which share
	// transport.MaxUnackedBytes of unacknowledged data (setSender). Lock
	// order: sendMu before a QP's mu.
	sendMu  sync.Mutex
	senders map[*QP]struct{}

	rt *runtime
}

// DefaultName is the name of a device opened without Options.Name.
const DefaultName = "goroce0"

// maxNameLen is the longest device name: the kernel's IB_DEVICE_NAME_MAX
// (64) less its NUL, the room ibv_devinfo and perftest have for -d.
const maxNameLen = 63

// checkName refuses a device name the verbs tools could not carry: too
// long, or with a byte that is not printable ASCII or is a space (hca_id
// is printed as a word, and -d takes it as one).
func checkName(name string) error {
	if len(name) > maxNameLen {
		return fmt.Errorf("%w: device name of %d bytes (at most %d)", ErrInvalidArg, len(name), maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: device name %q: byte %d is not printable ASCII or is a space", ErrInvalidArg, name, i)
		}
	}
	return nil
}

// Open creates a device on ep and starts its runtime. The device owns ep
// from now on and closes it in Close.
func Open(ep link.Endpoint, opts Options) (*Device, error) {
	if ep == nil {
		return nil, fmt.Errorf("%w: nil link endpoint", ErrInvalidArg)
	}
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if err := checkName(opts.Name); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Device{
		name: opts.Name, ep: ep, opts: opts, log: log, epoch: time.Now(),
		mac: ep.HardwareAddr(), format: ep.Format(),
		nextPD: 1, pds: map[uint32]*PD{}, cqs: map[*CQ]struct{}{}, srqs: map[*SRQ]struct{}{},
		nextQPN: firstQPN, closeDone: make(chan struct{}),
	}
	switch d.format {
	case link.FormatEthernet, link.FormatIP:
	default:
		return nil, fmt.Errorf("%w: link format %s (only Ethernet and IP links carry RoCE)", ErrNotSupported, d.format)
	}
	d.kind4 = wire.KindRoCEv2IPv4
	if opts.RoCEv1 {
		if d.format != link.FormatEthernet {
			return nil, fmt.Errorf("%w: RoCEv1 needs an Ethernet link, not %s", ErrInvalidArg, d.format)
		}
		d.kind4 = wire.KindRoCEv1
	}
	d.sport = opts.UDPSourcePort
	if sp, ok := ep.(link.SourcePorter); ok && d.sport == 0 {
		d.sport = sp.SourcePort()
	}
	d.buildGIDTable()
	if len(d.gids) == 0 {
		return nil, fmt.Errorf("%w: link has no IP address to build a GID from", ErrInvalidArg)
	}
	d.attr = defaultDeviceAttr(d.mac)
	linkMTU := ep.MTU()
	active := bth.LargestMTU(linkMTU - rxeMaxHdrLength)
	if active == 0 {
		return nil, fmt.Errorf("%w: link MTU %d leaves no room for the smallest IB MTU (256)", ErrInvalidArg, linkMTU)
	}
	ll := "Ethernet"
	d.port = PortAttr{
		State: "PORT_ACTIVE", MaxMTU: bth.MTU4096, ActiveMTU: active,
		GIDTblLen: gidTableLen, PKeyTblLen: 1, LinkLayer: ll, MaxMsgSize: maxMsgSize,
		ActiveSpeed: "2.5 Gbps", ActiveWidth: "1X", PhysState: "LINK_UP",
	}
	rt, err := newRuntime(d, shardCount(ep, opts.Shards))
	if err != nil {
		return nil, fmt.Errorf("hca: transmit queues: %w", err)
	}
	d.rt = rt
	d.rt.start()
	return d, nil
}

const (
	firstQPN        = 0x11 // rxe starts QPNs at 16 plus its QP0/QP1; 0x11 matches the captures
	rxeMaxHdrLength = 80   // RXE_MAX_HDR_LENGTH: the header reserve rxe subtracts from the netdev MTU
	gidTableLen     = 1024
	maxMsgSize      = 1 << 31
)

func defaultDeviceAttr(mac net.HardwareAddr) DeviceAttr {
	guid := eui64(mac)
	return DeviceAttr{
		FWVer: "0.1.0", NodeGUID: guid, SysImageGUID: guid,
		MaxMRSize: ^uint64(0), PageSizeCap: 0xfffff000,
		VendorID: 0xffffff, VendorPartID: 0, HWVer: 0,
		MaxQP: 1 << 20, MaxQPWR: 1 << 14, MaxSGE: 32, MaxSGERd: 32,
		MaxCQ: 1 << 16, MaxCQE: 1 << 20, MaxMR: 1 << 20, MaxPD: 1 << 16,
		MaxQPRdAtom: 128, MaxQPInitRdAtom: 128, MaxResRdAtom: 1 << 20,
		AtomicCap: "ATOMIC_HCA", MaxAH: 1 << 16, MaxSRQ: 1 << 16, MaxSRQWR: 1 << 14,
		MaxSRQSGE: 27, MaxInlineData: 400, MaxMsgSize: maxMsgSize,
		PhysPortCnt: 1, MaxPKeys: 1, LocalCAAckDelay: 15,
	}
}

// eui64 derives a GUID from a MAC as rxe does (addrconf_addr_eui48); links
// without a MAC get a GUID from a fixed locally-administered prefix.
func eui64(mac net.HardwareAddr) uint64 {
	var b [8]byte
	if len(mac) == 6 {
		b = [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	} else {
		b = [8]byte{0x02, 0x67, 0x6f, 0xff, 0xfe, 0x72, 0x63, 0x65}
	}
	return binary.BigEndian.Uint64(b[:])
}

// buildGIDTable follows rxe on a netdev: index 0 is the link-local GID
// derived from the MAC (when the link has one), then the IPv4-mapped GID of
// each IPv4 address, then the other IPv6 addresses.
func (d *Device) buildGIDTable() {
	var gids []GID
	var ll GID
	if len(d.mac) == 6 {
		ll[0], ll[1] = 0xfe, 0x80
		binary.BigEndian.PutUint64(ll[8:], eui64(d.mac))
		gids = append(gids, ll)
	}
	for _, a := range d.ep.Addrs() {
		if a.Is4() || a.Is4In6() {
			gids = append(gids, GIDFromAddr(a.Unmap()))
		}
	}
	for _, a := range d.ep.Addrs() {
		if a.Is6() && !a.Is4In6() && GIDFromAddr(a) != ll {
			gids = append(gids, GIDFromAddr(a))
		}
	}
	for i, g := range gids {
		d.gids = append(d.gids, GIDEntry{Index: i, GID: g, Type: "RoCE v2"})
	}
	if d.opts.RoCEv1 {
		for i := range d.gids {
			d.gids[i].Type = "RoCE v1"
		}
	}
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// Link returns the device's link endpoint.
func (d *Device) Link() link.Endpoint { return d.ep }

// Query returns the device attributes (ibv_query_device).
func (d *Device) Query() DeviceAttr { return d.attr }

// QueryPort returns the attributes of port 1 (ibv_query_port).
func (d *Device) QueryPort() PortAttr { return d.port }

// GIDs returns the GID table of port 1.
func (d *Device) GIDs() []GIDEntry { return append([]GIDEntry(nil), d.gids...) }

// QueryGID returns the GID at index (ibv_query_gid).
func (d *Device) QueryGID(index int) (GID, error) {
	if index < 0 || index >= len(d.gids) {
		return GID{}, fmt.Errorf("%w: %d (the table has %d entries)", ErrNoGID, index, len(d.gids))
	}
	return d.gids[index].GID, nil
}

// GIDIndex returns the index of the GID for addr, or an error.
func (d *Device) GIDIndex(addr netip.Addr) (int, error) {
	g := GIDFromAddr(addr.Unmap())
	for _, e := range d.gids {
		if e.GID == g {
			return e.Index, nil
		}
	}
	return -1, fmt.Errorf("%w: no GID for address %s", ErrNoGID, addr)
}

func (d *Device) hasGID(g GID) bool {
	for i := range d.gids {
		if d.gids[i].GID == g {
			return true
		}
	}
	return false
}

func (d *Device) now() transport.Time { return transport.Time(time.Since(d.epoch)) }

// Close destroys every object of the device, stops its goroutines and
// closes the link. It is safe to call more than once. As with QP.Destroy,
// work requests still outstanding are dropped without completions (the QPs
// are not moved to ERR first); CQ.Poll still returns what the CQs held, then
// ErrDestroyed, and every goroutine in CQ.Wait returns ErrDestroyed. To
// collect every WR's completion, move the QPs to ERR and poll their flushes
// before closing.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		<-d.closeDone
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	defer close(d.closeDone)
	err := d.rt.stop()
	d.qps.each(func(q *QP) { q.markDestroyed() })
	// MRs and AHs too: their keys and handles name nothing any more, and
	// their Dereg and Destroy report ErrDestroyed as the other objects'
	// do, instead of succeeding on a closed device.
	d.mrs.clear()
	d.ahs.clear()
	// Closed, so that a goroutine ranging over Events ends with the
	// device instead of waiting for good.
	d.evMu.Lock()
	d.evClosed = true
	close(d.rt.events)
	d.evMu.Unlock()
	d.mu.Lock()
	for cq := range d.cqs {
		cq.close()
	}
	srqs := make([]*SRQ, 0, len(d.srqs))
	for s := range d.srqs {
		srqs = append(srqs, s)
	}
	pds := make([]*PD, 0, len(d.pds))
	for _, pd := range d.pds {
		pds = append(pds, pd)
	}
	d.mu.Unlock()
	// SRQs and PDs too, so that their calls after Close fail as the QPs'
	// and CQs' do: an SRQ would take receives nothing completes, and a
	// PD, still counting the QPs Close destroyed, would refuse
	// deallocation as in use. Outside d.mu: their Destroy and Dealloc
	// take their own lock before it.
	for _, s := range srqs {
		s.mu.Lock()
		s.kill()
		s.mu.Unlock()
	}
	for _, pd := range pds {
		pd.mu.Lock()
		pd.dead = true
		pd.mu.Unlock()
	}
	return err
}

func (d *Device) checkOpen() error {
	if d.closed {
		return ErrClosed
	}
	return nil
}

// open is checkOpen for callers that do not hold d.mu.
func (d *Device) open() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.checkOpen()
}
