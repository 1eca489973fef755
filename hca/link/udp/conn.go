//go:build linux

package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link"
)

// Connected sockets (IPv4).
//
// sendmsg on an unconnected UDP socket looks the route up for every
// datagram; on a connected one it uses the route cached in the socket. In
// the TCG guest of bench-vs-rxe that lookup is a large share of a small
// send: a busy-polled UDP ping-pong shaped like goroce's traffic
// (interop/udplat -raw -gso 2) took 31-34 us per half round trip from an
// unconnected socket and 20-27 us from a connected one (docs/performance.md,
// session 8). So each transmit state sends to each IPv4 destination it
// meets (up to maxConns) through a socket of its own, bound to the link's
// address and port like the holder socket and connected to the
// destination's address and port.
//
// The IPv4 ID is what makes this delicate: the ICRC covers it, and a
// connected socket does not send ID 0 as an unconnected DF socket does.
// Linux gives the datagrams of a connected DF socket its inet_id counter,
// set to a random value by connect(2) and advanced by one per skb sent (a
// GSO super-datagram's segments then carry id, id+1, ... on the wire). The
// counter is used whatever the destination of the datagram, so after
// connecting, newConn sends three probes to a socket of its own on the
// link's address (a datagram, a 2-segment GSO super-datagram, a datagram)
// with SO_TIMESTAMPING on, reads each one's IP header back from the error
// queue (the looped copy of the packet carries its headers) and checks that
// the IDs advance as expected. No probe leaves the host. From then on the
// transmit state, the socket's only user, knows every ID the kernel will
// give and corrects each frame's ICRC for it (vnet.IDBasis), as it does
// for GSO segments 1..n on the unconnected socket.
//
// Any send error on a connected socket (an ICMP error the kernel reports
// on the next send, a route gone, a filter) may have consumed an ID without
// sending, so the socket is set aside and the frames go again through the
// unconnected socket, which carries the destination for a while: see
// setAside for how long and why, and revive for the way back.

// connectEnv, set to 0 or 1, overrides Config.NoConnect.
const connectEnv = "GOROCE_UDP_CONNECT"

// rxRingEnv overrides Config.RxRing: "1" or "0".
const rxRingEnv = "GOROCE_UDP_RXRING"

// plainEnv overrides Config.PlainIPv4: "1" or "0" (to try the unprivileged
// receive path as root, e.g. against kernel rxe).
const plainEnv = "GOROCE_UDP_PLAIN"

// maxConns bounds the connected sockets of one transmit state; other
// destinations use the unconnected socket.
const maxConns = 8

// connRetryMin and connRetryMax bound how many messages to its destination
// a connected socket set aside after a send error leaves to the
// unconnected socket before it is re-probed (setAside).
const (
	connRetryMin = 64
	connRetryMax = 16384
)

// conn is one transmit state's connected socket to one destination.
type conn struct {
	dst   [4]byte
	dport uint16
	rc    syscall.RawConn
	dead  bool   // not usable (creation failed: rc nil, for good; or set aside after a send error): send unconnected
	next  uint16 // the IP ID the kernel gives the next skb
	build uint16 // next, advanced over the messages of the Write being built
	// perSeg: the counter advances by the segment count of a GSO
	// super-datagram, not by one (not seen on Linux 6.1 or 6.18; the probe
	// measures it).
	perSeg bool

	// Set aside after a send error (setAside, revive).
	wait    int    // messages to send unconnected before re-probing
	waited  int    // the wait last set
	backoff int    // the wait the next error sets (0: connRetryMin)
	good    int    // messages sent since the socket was last revived
	failGen uint64 // txState.gen of the Write that set it aside
}

// setAside takes c out of use after a send error in Write gen. The error
// may have come after the kernel took an IP ID, so c's counter is no longer
// known: c must be re-probed before it sends again (revive).
//
// Why not for good: most errors pass (ECONNREFUSED from an ICMP port
// unreachable while the peer was not yet listening, which the kernel
// reports once; ENOBUFS; a route being replaced), and every message to the
// destination would otherwise pay the route lookup a connected socket
// saves for the rest of the run. Why not at once: an error that lasts
// (a peer gone, a filter) would then cost a probe (six system calls) and a
// failed send with every message. So c waits a number of messages, not a
// time (Write has no clock on its path and the count is deterministic),
// that doubles with each error, from connRetryMin to connRetryMax, and
// goes back to connRetryMin once c has carried as many messages since its
// revival as it last waited: against a lasting error, at most one message
// in connRetryMax tries the connected socket; after a passing one, the
// destination is back on it within connRetryMin messages.
func (c *conn) setAside(gen uint64) {
	if c.backoff == 0 {
		c.backoff = connRetryMin
	}
	c.dead, c.wait, c.waited, c.failGen = true, c.backoff, c.backoff, gen
	c.backoff = min(2*c.backoff, connRetryMax)
}

// sent records n messages sent through c.
func (c *conn) sent(n int) {
	if c.good += n; c.good >= c.waited {
		c.backoff = connRetryMin
	}
}

// revive reports whether c, set aside after a send error, carries the
// message being built: not in the Write that set it aside (its resend goes
// unconnected, and a lasting error cannot recur within one Write), not
// before it waited its messages, and only if a new probe learns its ID
// counter (probeIPID; c.build follows it).
func (t *txState) revive(c *conn) bool {
	if c.rc == nil || c.failGen == t.gen {
		return false
	}
	if c.wait > 0 {
		c.wait--
		return false
	}
	next, perSeg, err := t.e.reprobe(c)
	if err != nil {
		t.e.st.connReprobeFailed.Add(1)
		c.setAside(t.gen)
		return false
	}
	c.next, c.build, c.perSeg, c.dead, c.good = next, next, perSeg, false, 0
	t.e.st.connRevived.Add(1)
	return true
}

// reprobe learns connected socket c's ID counter again (probeIPID), in the
// endpoint's network namespace, where the probe's sink must be.
func (e *Endpoint) reprobe(c *conn) (next uint16, perSeg bool, err error) {
	// Under qmu, as newConn: Close closes e.netns and the sockets under
	// it, and a Write racing Close must not read the file it closes.
	e.qmu.Lock()
	defer e.qmu.Unlock()
	if e.closed.Load() {
		return 0, false, link.ErrClosed
	}
	unlock, err := lockNetNS(e.netns)
	if err != nil {
		return 0, false, err
	}
	defer unlock()
	gso := e.gso.Load()
	if cerr := c.rc.Control(func(fd uintptr) { next, perSeg, err = probeIPID(int(fd), e.cfg.Addr.As4(), gso) }); cerr != nil {
		return 0, false, cerr
	}
	return next, perSeg, err
}

// advance returns the ID after a message of segs segments starting at id.
func (c *conn) advance(id uint16, segs int) uint16 {
	if c.perSeg {
		return id + uint16(segs)
	}
	return id + 1
}

// connFor returns the index in t.conns of the connected socket for the
// destination of IPv4 frame f, opening it on first use, or -1 when f goes
// through the unconnected socket.
func (t *txState) connFor(f []byte) int {
	dst := [4]byte(f[16:20])
	dport := binary.BigEndian.Uint16(f[22:24])
	for i, c := range t.conns {
		if c.dst == dst && c.dport == dport {
			if c.dead && !t.revive(c) {
				return -1
			}
			return i
		}
	}
	if len(t.conns) >= maxConns || dst[0] >= 224 || dst[0] == 0 {
		// Multicast, broadcast and "this network" destinations stay on
		// the unconnected socket, whose options they would need.
		return -1
	}
	c := t.e.takeSpare(dst, dport)
	if c == nil {
		c = t.e.newConn(dst, dport)
	}
	c.build = c.next // write reset the others' before it came here
	t.conns = append(t.conns, c)
	if c.dead {
		return -1
	}
	return len(t.conns) - 1
}

// connDst is a connected socket's destination.
type connDst struct {
	addr [4]byte
	port uint16
}

// Prepare implements link.Preparer: it opens the connected socket a
// transmit state would open at its first frame to dst (IPv4, when the
// endpoint sends from connected sockets), probe included, and keeps it for
// the first transmit state that sends there (takeSpare). Each destination
// is prepared once, and at most maxConns of them.
func (e *Endpoint) Prepare(dst netip.AddrPort) {
	a := dst.Addr().Unmap()
	if e.is6 || e.cfg.NoConnect || !a.Is4() {
		return
	}
	d := connDst{a.As4(), dst.Port()}
	if d.addr[0] >= 224 || d.addr[0] == 0 {
		return // sent unconnected (connFor)
	}
	e.qmu.Lock()
	if e.closed.Load() || slices.Contains(e.prepared, d) || len(e.prepared) >= maxConns {
		e.qmu.Unlock()
		return
	}
	e.prepared = append(e.prepared, d)
	e.qmu.Unlock()
	c := e.newConn(d.addr, d.port)
	if c.dead {
		return // ConnErr says why; the first frame tries again
	}
	e.qmu.Lock()
	e.spare = append(e.spare, c)
	e.qmu.Unlock()
}

// takeSpare hands over the socket Prepare opened to dst:dport, or nil.
func (e *Endpoint) takeSpare(dst [4]byte, dport uint16) *conn {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	for i, c := range e.spare {
		if c.dst == dst && c.dport == dport {
			e.spare = slices.Delete(e.spare, i, i+1)
			return c
		}
	}
	return nil
}

// newConn opens a connected socket to dst:dport. On failure the conn is
// dead (the destination is sent to unconnected) and ConnErr says why.
func (e *Endpoint) newConn(dst [4]byte, dport uint16) *conn {
	c := &conn{dst: dst, dport: dport, dead: true}
	e.qmu.Lock()
	defer e.qmu.Unlock()
	if e.closed.Load() {
		return c
	}
	fail := func(err error) *conn {
		e.st.connFailed.Add(1)
		if e.connErr == nil {
			e.connErr = err
		}
		return c
	}
	// The socket must live in the endpoint's network namespace, which need
	// not be the calling thread's (see SplitRx).
	unlock, err := lockNetNS(e.netns)
	if err != nil {
		return fail(err)
	}
	defer unlock()
	fd, next, perSeg, err := e.openConn(dst, dport)
	if err != nil {
		return fail(err)
	}
	f, err := e.w.File(fd, "udp-conn")
	if err != nil {
		unix.Close(fd)
		return fail(fmt.Errorf("udp: connected socket: %w", err))
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fail(fmt.Errorf("udp: connected socket: %w", err))
	}
	e.queues = append(e.queues, f)
	e.connFDs = append(e.connFDs, fd)
	c.rc, c.next, c.perSeg, c.dead = rc, next, perSeg, false
	e.st.connOpened.Add(1)
	return c
}

// openConn returns a socket bound to the endpoint's address and port,
// connected to dst:dport, and the IP ID the kernel gives its next skb.
// e.qmu is held.
func (e *Endpoint) openConn(dst [4]byte, dport uint16) (fd int, next uint16, perSeg bool, err error) {
	fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, 0, false, fmt.Errorf("udp: connected socket: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
		return fd, 0, false, fmt.Errorf("udp: connected socket: IP_MTU_DISCOVER: %w", err)
	}
	setBuffers(fd, 0, e.cfg.SendBuf)
	// Datagrams from dst:dport now reach this socket rather than the
	// holder: like the holder it keeps none (the raw socket receives), and
	// UDP_GRO spares the kernel segmenting GSO datagrams to drop them.
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
	if err = attachFilter(fd, dropAll()); err != nil {
		return fd, 0, false, err
	}
	if err = e.bindBeside(fd); err != nil {
		return fd, 0, false, err
	}
	if err = unix.Connect(fd, &unix.SockaddrInet4{Addr: dst, Port: int(dport)}); err != nil {
		return fd, 0, false, fmt.Errorf("udp: connect %v:%d: %w", dst, dport, err)
	}
	next, perSeg, err = probeIPID(fd, e.cfg.Addr.As4(), e.gso.Load())
	return fd, next, perSeg, err
}

// bindBeside binds fd to the endpoint's address and port, which the holder
// socket and the other connected sockets hold: SO_REUSEADDR is set on all
// of them for the bind and cleared after it, so that another process (a
// second goroce on the address, rdma_rxe) still gets EADDRINUSE. e.qmu is
// held.
func (e *Endpoint) bindBeside(fd int) error {
	setReuse := func(on int) error {
		var err error
		if cerr := e.udpRC.Control(func(s uintptr) {
			err = unix.SetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_REUSEADDR, on)
		}); cerr != nil {
			return cerr
		}
		for _, c := range e.connFDs {
			if err2 := unix.SetsockoptInt(c, unix.SOL_SOCKET, unix.SO_REUSEADDR, on); err == nil {
				err = err2
			}
		}
		if err2 := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, on); err == nil {
			err = err2
		}
		return err
	}
	err := setReuse(1)
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Addr: e.cfg.Addr.As4(), Port: int(e.cfg.Port)})
	}
	if err2 := setReuse(0); err == nil {
		err = err2
	}
	if err != nil {
		return fmt.Errorf("udp: connected socket: bind %v:%d: %w", e.cfg.Addr, e.cfg.Port, err)
	}
	return nil
}

// probeIPID learns the IP ID connected socket fd gives its next skb and
// whether a GSO super-datagram advances it by its segment count (perSeg):
// it sends probes to a socket of its own on addr (never to the peer) and
// reads their IP headers back with SO_TIMESTAMPING.
func probeIPID(fd int, addr [4]byte, gso bool) (next uint16, perSeg bool, err error) {
	sink, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return 0, false, fmt.Errorf("udp: IP ID probe: %w", err)
	}
	defer unix.Close(sink)
	if err := unix.Bind(sink, &unix.SockaddrInet4{Addr: addr}); err != nil {
		return 0, false, fmt.Errorf("udp: IP ID probe: bind: %w", err)
	}
	sa, err := unix.Getsockname(sink)
	if err != nil {
		return 0, false, fmt.Errorf("udp: IP ID probe: %w", err)
	}
	to := &unix.SockaddrInet4{Addr: addr, Port: sa.(*unix.SockaddrInet4).Port}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING,
		unix.SOF_TIMESTAMPING_TX_SCHED|unix.SOF_TIMESTAMPING_SOFTWARE); err != nil {
		return 0, false, fmt.Errorf("udp: IP ID probe: SO_TIMESTAMPING: %w", err)
	}
	defer func() {
		if e := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, 0); e != nil && err == nil {
			err = fmt.Errorf("udp: IP ID probe: SO_TIMESTAMPING off: %w", e)
		}
		drainErrQueue(fd)
	}()
	segs := []int{1, 1}
	if gso {
		segs = []int{1, 2, 1}
	}
	var ids []uint16
	buf := make([]byte, 512)
	for _, n := range segs {
		msg := make([]byte, 8*n)
		if n > 1 {
			oob := make([]byte, cmsgSpace2)
			h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
			h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
			h.SetLen(unix.CmsgLen(2))
			binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], 8)
			err = unix.Sendmsg(fd, msg, oob, to, 0)
		} else {
			err = unix.Sendto(fd, msg, 0, to)
		}
		if err != nil {
			return 0, false, fmt.Errorf("udp: IP ID probe: send: %w", err)
		}
		id, err := readProbeID(fd, buf, addr, uint16(to.Port))
		if err != nil {
			return 0, false, err
		}
		ids = append(ids, id)
	}
	last := len(ids) - 1
	for i := 1; i < len(ids); i++ {
		want := ids[i-1] + 1
		if gso && i == 2 && ids[i] == ids[i-1]+2 {
			perSeg, want = true, ids[i-1]+2
		}
		if ids[i] != want {
			return 0, false, fmt.Errorf("udp: IP ID probe: IDs %v do not advance by one per datagram", ids)
		}
	}
	return ids[last] + 1, perSeg, nil
}

var errNoProbe = errors.New("udp: IP ID probe: no looped packet with its headers on the error queue")

// readProbeID reads the looped copy of the probe just sent to addr:port from
// fd's error queue and returns its IP ID. The copy starts at the link-layer
// header (loopback's is 14 bytes); the IPv4 header is found by its fields.
func readProbeID(fd int, buf []byte, addr [4]byte, port uint16) (uint16, error) {
	oob := make([]byte, 256)
	for try := 0; ; try++ {
		n, _, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if err == unix.EAGAIN && try < 20 {
			// The loopback path stamps it inside the send; wait a little
			// in case another device is in the way.
			time.Sleep(100 * time.Microsecond)
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errNoProbe, err)
		}
		p := buf[:n]
		for off := 0; off+ipv4Hdr+udpHdr <= len(p); off++ {
			h := p[off:]
			if h[0] == 0x45 && h[9] == unix.IPPROTO_UDP && [4]byte(h[12:16]) == addr &&
				[4]byte(h[16:20]) == addr && binary.BigEndian.Uint16(h[22:24]) == port {
				return binary.BigEndian.Uint16(h[4:6]), nil
			}
		}
		return 0, errNoProbe
	}
}

// drainErrQueue discards what is left on fd's error queue.
func drainErrQueue(fd int) {
	var b [64]byte
	for range 16 {
		if _, _, _, _, err := unix.Recvmsg(fd, b[:], nil, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT); err != nil {
			return
		}
	}
}
