// Package link defines how an HCA port moves frames: the Endpoint interface
// every backend implements (in-memory pair, UDP socket, AF_PACKET, TUN/TAP,
// the pcap tap that wraps another link), the frame formats, and the optional
// capability interfaces callers discover by type assertion.
//
// The shape follows wireguard-go's conn.Bind and tun.Device: batches of
// caller-owned buffers with an offset of headroom, a batch size fixed for the
// life of the endpoint, and no allocation per frame.
//
// This package imports the standard library and goroce's wire package only.
package link

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
)

// Format is what one frame on a link is.
type Format uint8

// Frame formats.
const (
	// FormatEthernet frames start with an Ethernet header (optionally
	// 802.1Q-tagged) and carry RoCEv2 (IPv4/IPv6 + UDP 4791) or RoCEv1
	// (ethertype 0x8915 + GRH). AF_PACKET and TAP links.
	FormatEthernet Format = iota + 1
	// FormatIP frames start with an IPv4 or IPv6 header and carry RoCEv2.
	// TUN links and the UDP socket link.
	FormatIP
	// FormatIB frames are native InfiniBand: LRH [GRH] BTH ... ICRC VCRC.
	FormatIB
)

func (f Format) String() string {
	switch f {
	case FormatEthernet:
		return "ethernet"
	case FormatIP:
		return "ip"
	case FormatIB:
		return "ib"
	}
	return "unknown"
}

// Endpoint is one side of a link.
//
// Concurrency: one goroutine may Read while another Writes; Read and Write
// are each single-caller. Close may be called from any goroutine, at any
// time, more than once.
type Endpoint interface {
	// Read receives up to len(bufs) frames. Frame i is written to
	// bufs[i][offset:] and its length stored in sizes[i]; n is the number of
	// frames received. Read blocks until at least one frame arrives or the
	// endpoint is closed, in which case it returns net.ErrClosed. A frame
	// larger than the buffer is dropped and counted by the backend, never
	// truncated. Read does not retain bufs after it returns.
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)

	// Write sends bufs[i][offset:] for every i as one frame each, in order.
	// It returns the number of frames handed to the link; a short count comes
	// with an error. Write does not retain bufs after it returns.
	Write(bufs [][]byte, offset int) (n int, err error)

	// BatchSize is the largest number of frames one Read or Write handles.
	// It is fixed for the life of the endpoint.
	BatchSize() int

	// MTU is the link MTU in bytes: the largest IP packet (FormatEthernet,
	// FormatIP) or the largest IB packet from LRH through VCRC (FormatIB).
	MTU() int

	// Format says what a frame is.
	Format() Format

	// Headroom is how many bytes before offset a writer must leave free for
	// the backend's own use (for example a virtio-net header). Most
	// backends return 0.
	Headroom() int

	// Addrs returns the local IP addresses of the link, from which the HCA
	// builds its GID table. HardwareAddr returns the MAC for Ethernet links
	// and nil otherwise.
	Addrs() []netip.Addr
	HardwareAddr() net.HardwareAddr

	// Close releases the endpoint and unblocks a pending Read.
	Close() error
}

// Writer is the transmit half of an Endpoint (see Endpoint.Write).
type Writer interface {
	Write(bufs [][]byte, offset int) (n int, err error)
}

// TxQueuer is implemented by links that can transmit from several
// goroutines at once. Each NewTxQueue returns a Writer that one goroutine
// may use concurrently with the endpoint's own Write, with Read and with
// every other queue (on the UDP link, a duplicate of the socket with its
// own batching state, so the kernel's per-file write lock is not shared).
// Frames of one queue leave in order; frames of different queues may
// interleave. Queues share the endpoint's configuration, counters and
// lifetime: Close closes them too.
type TxQueuer interface {
	NewTxQueue() (Writer, error)
}

// IdealBatchSize is the batch size backends aim for (wireguard-go uses 128).
const IdealBatchSize = 64

// ReadBatch returns the buffers a Read(bufs, sizes, offset) may fill on a
// backend that reads at most max frames at once: no more than sizes has
// entries, ending before the first buffer with no room after offset. API
// misuse gets an error, never a panic on an index: a negative offset, or
// io.ErrShortBuffer when the first buffer has no room. An empty result
// with a nil error means Read returns 0, nil. who names the backend in
// the negative offset's error.
func ReadBatch(who string, bufs [][]byte, sizes []int, offset, max int) ([][]byte, error) {
	bufs = bufs[:min(len(bufs), len(sizes), max)]
	if len(bufs) == 0 {
		return nil, nil
	}
	if offset < 0 {
		return nil, fmt.Errorf("%s: negative offset %d", who, offset)
	}
	for k := range bufs {
		if len(bufs[k]) <= offset {
			if k == 0 {
				return nil, io.ErrShortBuffer
			}
			return bufs[:k], nil
		}
	}
	return bufs, nil
}

// ErrNotSupported is returned (wrapped) when a capability is absent.
var ErrNotSupported = errors.New("link: not supported")

// ErrClosed is what Read and Write return after Close.
var ErrClosed = net.ErrClosed

// ErrFrameTooLarge is returned by Write for a frame over the link MTU.
var ErrFrameTooLarge = errors.New("link: frame larger than the link MTU")

// SourcePorter is implemented by links that send through a kernel UDP socket
// bound to a fixed port (hca/link/udp): the kernel writes that UDP source
// port into every packet, and the ICRC covers the source port, so the HCA
// must build its headers with SourcePort instead of the per-QP
// rdma_get_udp_sport value. Such links also let the kernel write the IPv4
// identification: an unconnected socket with IP_PMTUDISC_DO sends IP ID 0
// (wire-spec §14), so frames must be built with IP ID 0 and DF set.
type SourcePorter interface {
	SourcePort() uint16
}

// Preparer is implemented by links that keep per-destination state for
// sending and can set it up before the first frame to a destination (the
// udp link's connected socket, with its IP ID probe). The HCA calls Prepare
// when a connected QP gets its path and when an AH is created, outside the
// data path; without it the first frame pays for the setup, which in the
// TCG guest of bench-vs-rxe is 5-35 ms on each side of a new connection's
// first round trip, enough to outlast perftest's 67 ms ACK timeout together
// with the rest of a fresh process's first packets. Prepare is best
// effort: a destination it could not prepare is set up (or sent to
// without that state) at its first frame, as without it.
type Preparer interface {
	Prepare(dst netip.AddrPort)
}

// Reader is the receive half of an Endpoint (see Endpoint.Read).
type Reader interface {
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
}

// RxQueuer is implemented by links that can spread received frames over
// several readers by destination QP, so that several goroutines receive
// and process at once. After SplitRx(n), the endpoint's own Read returns
// only the frames whose BTH DestQP mod n is 0 (and frames too short to
// carry a BTH, so that they are still counted), and the i-th returned
// Reader (i from 0) the frames whose DestQP mod n is i+1. Each Reader is
// for one goroutine, concurrently with the others and with every writer.
// Call SplitRx once, before the first Read; the readers end with the
// endpoint's Close. A link that cannot split for its current configuration
// returns an error wrapping ErrNotSupported.
type RxQueuer interface {
	SplitRx(n int) ([]Reader, error)
}

// Viewer is implemented by links (and receive queues) that can hand
// received frames to the caller where they lie in the link's own buffers
// instead of copying them into the caller's (the UDP link splits a GRO or
// GSO super-datagram in place).
type Viewer interface {
	// ViewRead is Read (wait) or Poller.TryRead (!wait) that calls fn with
	// each frame received, in order, at most max of them, and returns how
	// many it passed. A frame is valid only during its call of fn, which
	// must not keep it: the link overwrites it next. Frames longer than
	// maxFrame are dropped and counted, as Read drops frames longer than
	// its buffers. A link that cannot for its configuration returns an
	// error wrapping ErrNotSupported, having consumed nothing; the caller
	// then uses Read. Calls must not overlap one another, Read or TryRead.
	ViewRead(wait bool, max, maxFrame int, fn func(frame []byte)) (n int, err error)
}

// Poller is implemented by links (and receive queues) whose reception can
// be driven without blocking, so that the HCA can busy-poll: an
// application spinning on a CQ (hca.Options.BusyPoll) receives and
// processes packets in its own goroutine instead of waiting for a reader
// goroutine to be woken, which costs tens of microseconds on a loaded or
// virtualized machine.
type Poller interface {
	// TryRead is Read that never waits: it returns (0, nil) when nothing
	// is queued. Calls must not overlap one another or Read.
	TryRead(bufs [][]byte, sizes []int, offset int) (n int, err error)
	// WaitRead blocks until a frame may be readable, or returns ErrClosed.
	// It consumes nothing and may run while another goroutine is in
	// TryRead.
	WaitRead() error
}
