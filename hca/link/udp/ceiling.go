//go:build linux

package udp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
)

// BlastConfig configures Blast, the raw path ceiling of `goroce bench
// --ceiling`: plain UDP datagrams of a RoCE packet's size between the
// addresses and port an Endpoint pair would use, with the Endpoint's socket
// options (buffer sizes, IP_PMTUDISC_DO, UDP GSO of up to 64 segments per
// super-datagram, sendmmsg batches of BatchSize, over IPv4 a sender
// connected to the destination) and none of its per-packet
// work (no ICRC, no raw-socket receive, no header checks).
type BlastConfig struct {
	// Src and Dst are the two local addresses (same family, required).
	Src, Dst netip.Addr
	// Port is both sockets' port (default DefaultPort).
	Port uint16
	// Size is the UDP payload of each datagram: a RoCE packet from BTH to
	// ICRC (required).
	Size int
	// BatchSize is the messages per sendmmsg (default link.IdealBatchSize).
	BatchSize int
	// NoGSO sends one datagram per message, as Config.NoGSO does.
	NoGSO bool
	// Duration of the blast (default 1 s).
	Duration time.Duration
	// SocketBuf is SO_SNDBUF/SO_RCVBUF (default DefaultSocketBuffer).
	SocketBuf int
	// Shape, when set, replaces Size: the UDP payload sizes of the
	// datagrams of one message, in order (MessageRuns says how they
	// travel). The blast then sends that message over and over, and its
	// result counts messages, not datagrams. It is the shaped ceiling of
	// `goroce bench --ceiling`: the most a sender that costs nothing could
	// move with the packets IBA makes of a message (an RDMA WRITE's first
	// packet carries a RETH, so it cannot share a run with the rest).
	Shape []int
}

// MessageRuns groups a message's datagrams (their UDP payload sizes) into
// the runs the udp link sends as one GSO super-datagram each (txState.run):
// a run is led by its longest segment, takes the equal ones that follow
// and may end with one shorter, within maxGSOSegments segments and a
// 65507-byte datagram. Each run is returned as its segment count.
func MessageRuns(sizes []int) []int {
	var runs []int
	for i := 0; i < len(sizes); {
		seg, sum, j := sizes[i], sizes[i], i+1
		for j < len(sizes) && j-i < maxGSOSegments && sizes[j] <= seg && sum+sizes[j] <= 65507 {
			sum += sizes[j]
			j++
			if sizes[j-1] < seg {
				break
			}
		}
		runs = append(runs, j-i)
		i = j
	}
	return runs
}

// BlastResult counts the datagrams of a Blast (with Shape: the messages).
type BlastResult struct {
	Sent, Received uint64
	Duration       time.Duration
	// Rates is the receive rate (datagrams, or messages, per second) in
	// each of the blast's BlastSlices consecutive slices of time, so that a
	// caller can take a figure a short stall of the host does not drag
	// down.
	Rates []float64
}

// BlastSlices is how many slices of time Blast's Rates cover.
const BlastSlices = 10

// Blast sends datagrams from cfg.Src to cfg.Dst for cfg.Duration while a
// goroutine receives them (recvmmsg, UDP GRO on: a GSO super-datagram on
// loopback arrives whole, as the Endpoint's IPv4 raw socket sees it), and
// counts what arrives.
func Blast(ctx context.Context, cfg BlastConfig) (BlastResult, error) {
	var res BlastResult
	if !cfg.Src.IsValid() || !cfg.Dst.IsValid() || cfg.Src.Is4() != cfg.Dst.Is4() {
		return res, fmt.Errorf("udp: blast needs two addresses of one family, have %v and %v", cfg.Src, cfg.Dst)
	}
	if len(cfg.Shape) > 0 {
		cfg.Size = 0
		for _, sz := range cfg.Shape {
			if sz <= 0 || sz > 65507 {
				return res, fmt.Errorf("udp: blast datagram size %d in shape %v", sz, cfg.Shape)
			}
			cfg.Size += sz // the unit counted: one message
		}
	} else if cfg.Size <= 0 || cfg.Size > 65507 {
		return res, fmt.Errorf("udp: blast datagram size %d", cfg.Size)
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = link.IdealBatchSize
	}
	if cfg.Duration <= 0 {
		cfg.Duration = time.Second
	}
	if cfg.SocketBuf <= 0 {
		cfg.SocketBuf = DefaultSocketBuffer
	}
	segs := 1
	if len(cfg.Shape) == 0 {
		segs = min(maxGSOSegments, 65507/cfg.Size)
	}
	if cfg.NoGSO || segs < 2 {
		segs = 1
	}
	tx, err := blastSocket(cfg.Src, cfg.Port, 0, cfg.SocketBuf)
	if err != nil {
		return res, err
	}
	defer unix.Close(tx)
	rx, err := blastSocket(cfg.Dst, cfg.Port, cfg.SocketBuf, 0)
	if err != nil {
		return res, err
	}
	defer unix.Close(rx)
	if segs > 1 {
		if err := unix.SetsockoptInt(tx, unix.IPPROTO_UDP, unix.UDP_SEGMENT, cfg.Size); err != nil {
			segs = 1 // no GSO on this kernel: datagrams one by one
		}
	}
	_ = unix.SetsockoptInt(rx, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
	_ = unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 20000})

	// Sender: BatchSize messages of segs datagrams each to Dst:Port.
	var sa4 unix.RawSockaddrInet4
	var sa6 unix.RawSockaddrInet6
	var name *byte
	var namelen uint32
	port := [2]byte{byte(cfg.Port >> 8), byte(cfg.Port)}
	if cfg.Dst.Is4() {
		sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: cfg.Dst.As4()}
		*(*[2]byte)(unsafe.Pointer(&sa4.Port)) = port
		name, namelen = (*byte)(unsafe.Pointer(&sa4)), unix.SizeofSockaddrInet4
	} else {
		sa6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: cfg.Dst.As16()}
		*(*[2]byte)(unsafe.Pointer(&sa6.Port)) = port
		name, namelen = (*byte)(unsafe.Pointer(&sa6)), unix.SizeofSockaddrInet6
	}
	if cfg.Dst.Is4() {
		// As the Endpoint sends IPv4 (conn.go): from a socket connected
		// to the destination, with its cached route.
		if err := unix.Connect(tx, &unix.SockaddrInet4{Addr: cfg.Dst.As4(), Port: int(cfg.Port)}); err != nil {
			return res, fmt.Errorf("udp: blast: connect: %w", err)
		}
		name, namelen = nil, 0
	}
	var msgs []unix.Mmsghdr
	perBatch := 0 // messages per batch (Shape)
	if len(cfg.Shape) > 0 {
		if _, err := unix.GetsockoptInt(tx, unix.IPPROTO_UDP, unix.UDP_SEGMENT); err != nil {
			cfg.NoGSO = true // no GSO on this kernel: datagrams one by one
		}
		msgs, perBatch = shapedBatch(cfg.Shape, cfg.BatchSize, cfg.NoGSO)
	} else {
		data := make([]byte, cfg.BatchSize*segs*cfg.Size)
		for i := range data {
			data[i] = byte(i)
		}
		msgs = make([]unix.Mmsghdr, cfg.BatchSize)
		iovs := make([]unix.Iovec, cfg.BatchSize)
		for i := range msgs {
			setIov(&iovs[i], data[i*segs*cfg.Size:(i+1)*segs*cfg.Size])
			msgs[i].Hdr.Iov = &iovs[i]
			msgs[i].Hdr.SetIovlen(1)
		}
	}
	for i := range msgs {
		msgs[i].Hdr.Name, msgs[i].Hdr.Namelen = name, namelen
	}
	// The messages' datagrams, for Sent: sendmmsg reports messages of the
	// batch (mmsghdrs), and with Shape a message of the blast is several.
	sentUnits := func(n int) uint64 { return uint64(n * segs) }
	if len(cfg.Shape) > 0 {
		sentUnits = func(n int) uint64 {
			if n == len(msgs) {
				return uint64(perBatch)
			}
			return uint64(n * perBatch / len(msgs)) // about: whole messages only
		}
	}

	var stop atomic.Bool
	var rxBytes atomic.Uint64
	var wg sync.WaitGroup
	wg.Go(func() {
		const rbuf = 65536
		rdata := make([]byte, cfg.BatchSize*rbuf)
		rmsgs := make([]unix.Mmsghdr, cfg.BatchSize)
		riovs := make([]unix.Iovec, cfg.BatchSize)
		for i := range rmsgs {
			setIov(&riovs[i], rdata[i*rbuf:(i+1)*rbuf])
			rmsgs[i].Hdr.Iov = &riovs[i]
			rmsgs[i].Hdr.SetIovlen(1)
		}
		for !stop.Load() {
			n, errno := mmsg(unix.SYS_RECVMMSG, uintptr(rx), rmsgs, 0)
			if errno != 0 {
				continue // timeout or EINTR: check stop
			}
			var b uint64
			for i := range rmsgs[:n] {
				b += uint64(rmsgs[i].Len)
			}
			rxBytes.Add(b)
		}
	})
	start := time.Now()
	// The slices have fixed ends, start + k*slice: a slice closed late (a
	// sendmmsg that blocked) does not push the later ones back, which left
	// the last too short to count on a loaded host. Slices that ended
	// during one call share the rate measured over it.
	slice := cfg.Duration / BlastSlices
	next := start.Add(slice) // the end of the first slice not recorded
	sliceAt, sliceBytes := start, uint64(0)
	closeSlices := func(now time.Time, b uint64) {
		rate := float64((b-sliceBytes)/uint64(cfg.Size)) / now.Sub(sliceAt).Seconds()
		for len(res.Rates) < BlastSlices && !next.After(now) {
			res.Rates = append(res.Rates, rate)
			next = next.Add(slice)
		}
		sliceAt, sliceBytes = now, b
	}
	var serr error
	for now := start; now.Sub(start) < cfg.Duration && ctx.Err() == nil; now = time.Now() {
		if !next.After(now) && len(res.Rates) < BlastSlices {
			closeSlices(now, rxBytes.Load())
		}
		n, errno := mmsg(unix.SYS_SENDMMSG, uintptr(tx), msgs, 0)
		if errno != 0 {
			if errno == unix.EINTR || errno == unix.EAGAIN || errno == unix.ENOBUFS {
				continue
			}
			serr = fmt.Errorf("udp: blast sendmmsg: %w", errno)
			break
		}
		res.Sent += sentUnits(n)
	}
	end := time.Now()
	res.Duration = end.Sub(start)
	time.Sleep(50 * time.Millisecond) // let the receiver drain
	stop.Store(true)
	wg.Wait()
	res.Received = rxBytes.Load() / uint64(cfg.Size)
	// The slices that ended with the sending share the rate since the last
	// one recorded; what was still in flight then has arrived during the
	// drain. A blast cut short by ctx records a last partial slice if it is
	// at least half a slice.
	if end.After(sliceAt) && len(res.Rates) < BlastSlices {
		if next.After(end) && end.Sub(next.Add(-slice)) >= slice/2 {
			next = end
		}
		closeSlices(end, rxBytes.Load())
	}
	if serr == nil && ctx.Err() != nil {
		serr = ctx.Err()
	}
	return res, serr
}

// shapedBatch is a sendmmsg batch of whole messages of the given shape,
// one after another as a sender's stream: the runs of MessageRuns over the
// whole batch (a run may span two messages, as the link's runs span the
// packets of consecutive messages of one QP), each one mmsghdr with its
// UDP_SEGMENT cmsg (every datagram its own with noGSO). It holds as many
// messages as fit in batch mmsghdrs, and at least one; it returns them
// with that count. Each message has its own bytes, as a sender's would.
func shapedBatch(shape []int, batch int, noGSO bool) ([]unix.Mmsghdr, int) {
	runsOf := func(seq []int) []int {
		if !noGSO {
			return MessageRuns(seq)
		}
		r := make([]int, len(seq))
		for i := range r {
			r[i] = 1
		}
		return r
	}
	seq := slices.Clone(shape)
	nmsg := 1
	for len(runsOf(append(seq, shape...))) <= batch {
		seq, nmsg = append(seq, shape...), nmsg+1
	}
	runs := runsOf(seq)
	total := 0
	for _, sz := range seq {
		total += sz
	}
	data := make([]byte, total)
	for i := range data {
		data[i] = byte(i)
	}
	msgs := make([]unix.Mmsghdr, len(runs))
	iovs := make([]unix.Iovec, len(msgs))
	oob := make([]byte, len(msgs)*cmsgSpace2)
	off, d := 0, 0 // byte offset and datagram index in seq
	for k, r := range runs {
		bytes := 0
		for _, sz := range seq[d : d+r] {
			bytes += sz
		}
		m := &msgs[k]
		setIov(&iovs[k], data[off:off+bytes])
		m.Hdr.Iov = &iovs[k]
		m.Hdr.SetIovlen(1)
		if r > 1 {
			c := oob[k*cmsgSpace2 : (k+1)*cmsgSpace2]
			h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
			h.SetLen(unix.CmsgLen(2))
			binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(seq[d]))
			m.Hdr.Control = &c[0]
			m.Hdr.SetControllen(len(c))
		}
		off += bytes
		d += r
	}
	return msgs, nmsg
}

// blastSocket is a blocking UDP socket bound to a:port with the Endpoint's
// buffer and path MTU discovery options.
func blastSocket(a netip.Addr, port uint16, rcv, snd int) (int, error) {
	fam := unix.AF_INET
	if a.Is6() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("udp: socket: %w", err)
	}
	setBuffers(fd, rcv, snd)
	var sa unix.Sockaddr
	if a.Is4() {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		sa = &unix.SockaddrInet4{Port: int(port), Addr: a.As4()}
	} else {
		err = errors.Join(unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1),
			unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO))
		sa = &unix.SockaddrInet6{Port: int(port), Addr: a.As16()}
	}
	if err == nil {
		if err = unix.Bind(fd, sa); err != nil {
			err = fmt.Errorf("udp: bind %v port %d: %w", a, port, err)
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
