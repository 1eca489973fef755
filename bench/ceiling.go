package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/wire"
)

// Ceiling is a path measurement of --ceiling: full-path-MTU RoCE-sized
// packets blasted between the benchmark's two endpoints with no HCA behind
// them, counted where they arrive. The caller measures the raw UDP path
// (hca/link/udp.Blast) and fills one in with NewCeiling; MeasureCeiling
// measures through link endpoints.
type Ceiling struct {
	// Method says how: "udp-blast" (plain sockets) or "link" (endpoints).
	Method string `json:"method"`
	// PacketBytes is the size of each frame (for the udp link the IP
	// packet); Payload the RoCE payload it carries (the path MTU).
	PacketBytes int           `json:"packet_bytes"`
	Payload     int           `json:"payload_bytes"`
	Sent        int           `json:"sent"`
	Delivered   int           `json:"delivered"`
	Duration    time.Duration `json:"duration_ns"`
	// PayloadBytesPerSec is Delivered*Payload per second: the rate at which
	// RDMA payload could move if the HCA cost nothing.
	PayloadBytesPerSec float64 `json:"payload_bytes_per_s"`
	PacketsPerSec      float64 `json:"packets_per_s"`
	// Slices, when set, says PacketsPerSec is the median of the receive
	// rates of that many equal slices of the blast (MedianOf), and
	// AveragePacketsPerSec the whole blast's Delivered / Duration.
	Slices               int     `json:"slices,omitempty"`
	AveragePacketsPerSec float64 `json:"average_packets_per_s,omitempty"`
	// Blasts, when set, lists the payload rate of each blast the ceiling
	// is the best of (BestCeiling), in the order they ran.
	Blasts []float64 `json:"blasts_payload_bytes_per_s,omitempty"`
	// MessageShape, when set, is the UDP payload size of each datagram of
	// one message (MessageShape): the blast sent that message over and
	// over, Sent, Delivered and PacketsPerSec count messages, PacketBytes
	// is one message's IP bytes and Payload its RDMA payload.
	MessageShape []int `json:"message_shape,omitempty"`
}

// BestCeiling returns the faster of blasts a and b (same payload size),
// with both figures in its Blasts: a ceiling is what the path can do, and
// one blast can run while the host is busy elsewhere.
func BestCeiling(a, b *Ceiling) *Ceiling {
	best := *a
	if b.PayloadBytesPerSec > a.PayloadBytesPerSec {
		best = *b
	}
	best.Blasts = []float64{a.PayloadBytesPerSec, b.PayloadBytesPerSec}
	return &best
}

// MedianOf makes the ceiling the median of rates, the receive rates
// (packets per second) of equal slices of the blast: a stall of the host
// in one slice, which would lower a whole-run average (one blast ran at
// 3.0 GB/s among runs at 5.2 on this project's 2-vCPU host, its sender
// descheduled), does not lower the median. The whole run's average stays
// in AveragePacketsPerSec. The median is no lower than most slices'
// rates, so goroce's ratio to it is not flattered.
func (c *Ceiling) MedianOf(rates []float64) {
	if len(rates) == 0 {
		return
	}
	r := slices.Clone(rates)
	slices.Sort(r)
	m := r[len(r)/2]
	if len(r)%2 == 0 {
		m = (r[len(r)/2-1] + r[len(r)/2]) / 2
	}
	c.AveragePacketsPerSec = c.PacketsPerSec
	c.Slices = len(r)
	c.PacketsPerSec = m
	c.PayloadBytesPerSec = m * float64(c.Payload)
}

// MeasureCeiling blasts RC RDMA WRITE MIDDLE packets of mtu payload bytes
// (consecutive PSNs to one QPN, the run the udp link turns into GSO
// super-datagrams) from src to dst for dur, in batches of src.BatchSize(),
// while a goroutine reads at dst. It closes both endpoints.
func MeasureCeiling(ctx context.Context, src, dst link.Endpoint, mtu bth.MTU, dur time.Duration) (*Ceiling, error) {
	defer src.Close()
	defer dst.Close()
	if !mtu.Valid() {
		return nil, fmt.Errorf("%w: MTU enum %d", ErrParams, uint8(mtu))
	}
	frames, err := ceilingFrames(src, dst, mtu.Bytes(), src.BatchSize())
	if err != nil {
		return nil, err
	}
	c := &Ceiling{Method: "link", PacketBytes: len(frames[0]), Payload: mtu.Bytes()}
	var got atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		n := dst.BatchSize()
		bufs := make([][]byte, n)
		for i := range bufs {
			bufs[i] = make([]byte, dst.MTU()+64)
		}
		sizes := make([]int, n)
		for {
			k, err := dst.Read(bufs, sizes, 0)
			got.Add(int64(k))
			if err != nil {
				return
			}
		}
	})
	start := time.Now()
	var werr error
	for time.Since(start) < dur && ctx.Err() == nil {
		n, err := src.Write(frames, 0)
		c.Sent += n
		if err != nil {
			werr = err
			break
		}
	}
	c.Duration = time.Since(start)
	time.Sleep(50 * time.Millisecond) // let the reader drain the socket
	c.Delivered = int(got.Load())
	dst.Close()
	wg.Wait()
	if werr != nil && !errors.Is(werr, link.ErrClosed) {
		return c, fmt.Errorf("bench: ceiling blast: %w", werr)
	}
	if c.Duration > 0 {
		c.PacketsPerSec = float64(c.Delivered) / c.Duration.Seconds()
		c.PayloadBytesPerSec = c.PacketsPerSec * float64(c.Payload)
	}
	return c, nil
}

// NewCeiling fills a Ceiling from a raw blast's counts: packetBytes is
// the size of each datagram, payload the RDMA payload it stands for.
func NewCeiling(method string, packetBytes, payload int, sent, delivered uint64, d time.Duration) *Ceiling {
	c := &Ceiling{Method: method, PacketBytes: packetBytes, Payload: payload, Sent: int(sent), Delivered: int(delivered), Duration: d}
	if d > 0 {
		c.PacketsPerSec = float64(delivered) / d.Seconds()
		c.PayloadBytesPerSec = c.PacketsPerSec * float64(payload)
	}
	return c
}

// Ratios sets CeilingRatio, ShapedCeilingRatio and LinkCeilingRatio from
// r's best bandwidth.
func (r *Report) Ratios() {
	best := r.bestResult().BW.BytesPerSec
	if c := r.ShapedCeiling; c != nil && c.PayloadBytesPerSec > 0 {
		r.ShapedCeilingRatio = best / c.PayloadBytesPerSec
	}
	if c := r.Ceiling; c != nil && c.PayloadBytesPerSec > 0 {
		r.CeilingRatio = best / c.PayloadBytesPerSec
	}
	if c := r.LinkCeiling; c != nil && c.PayloadBytesPerSec > 0 {
		r.LinkCeilingRatio = best / c.PayloadBytesPerSec
	}
}

// ShapedOfRaw is the shaped ceiling over the raw one: what the packets
// IBA makes of the run's messages leave of the raw path (false when
// either was not measured).
func (r *Report) ShapedOfRaw() (float64, bool) {
	if r.ShapedCeiling == nil || r.Ceiling == nil || r.Ceiling.PayloadBytesPerSec <= 0 {
		return 0, false
	}
	return r.ShapedCeiling.PayloadBytesPerSec / r.Ceiling.PayloadBytesPerSec, true
}

// bestResult is the result (size) of r with the highest bandwidth (the
// zero Result when there is none).
func (r *Report) bestResult() Result {
	var b Result
	for _, x := range r.Results {
		if x.BW.BytesPerSec > b.BW.BytesPerSec {
			b = x
		}
	}
	return b
}

// BestSize is the message size of r's best bandwidth, what its ceilings
// compare with (0 when r has no result).
func (r *Report) BestSize() int { return r.bestResult().BW.Size }

// MessageShape returns the UDP payload size (BTH, extended headers,
// payload, pad and ICRC) of each packet IBA makes of one message of size
// bytes at path MTU mtu in mode over conn, in the direction that carries
// the data (an RDMA READ's responses), and false for a mode that moves no
// bulk data (atomic_bw) or a message UD cannot carry. Every packet but the
// last carries exactly mtu bytes; first and only packets carry their
// extended headers (an RDMA WRITE's RETH, UD's DETH, a READ response's
// AETH), so an RDMA WRITE's first packet is 16 bytes longer than the rest
// and cannot be in their GSO run: the shaped ceiling of --ceiling.
func MessageShape(mode Mode, conn hca.QPType, size int, mtu bth.MTU) ([]int, bool) {
	if !mtu.Valid() || size < 0 {
		return nil, false
	}
	var first, middle, last, only bth.Opcode
	switch {
	case mode.isSend() && conn == hca.UD:
		if size > mtu.Bytes() {
			return nil, false
		}
		only = bth.OpUDSendOnly
	case mode.isSend():
		first, middle, last, only = bth.OpRCSendFirst, bth.OpRCSendMiddle, bth.OpRCSendLast, bth.OpRCSendOnly
	case mode == ModeWriteBW || mode == ModeWriteLat:
		first, middle, last, only = bth.OpRCRDMAWriteFirst, bth.OpRCRDMAWriteMiddle, bth.OpRCRDMAWriteLast, bth.OpRCRDMAWriteOnly
	case mode.isRead():
		first, middle, last, only = bth.OpRCRDMAReadResponseFirst, bth.OpRCRDMAReadResponseMiddle,
			bth.OpRCRDMAReadResponseLast, bth.OpRCRDMAReadResponseOnly
	default:
		return nil, false
	}
	// UC's opcodes carry the same headers as RC's.
	pkt := func(op bth.Opcode, payload int) int {
		return op.Info().HdrLen + (payload+3)&^3 + 4
	}
	m := mtu.Bytes()
	if size <= m {
		return []int{pkt(only, size)}, true
	}
	n := (size + m - 1) / m
	shape := make([]int, n)
	shape[0] = pkt(first, m)
	for i := 1; i < n-1; i++ {
		shape[i] = pkt(middle, m)
	}
	shape[n-1] = pkt(last, size-(n-1)*m)
	return shape, true
}

// RoCEPacketBytes is the UDP payload of a full RDMA WRITE MIDDLE packet
// of path MTU mtu: BTH, payload and ICRC.
func RoCEPacketBytes(mtu bth.MTU) int { return bth.HeaderLen + mtu.Bytes() + 4 }

// ceilingFrames builds n RDMA WRITE MIDDLE frames with consecutive PSNs,
// every lower header and the ICRC filled in by wire.Finish, addressed as
// the HCA would address them on src (IPv4 ID 0 and DF, src's UDP source
// port), so the link accepts and sends them unchanged.
func ceilingFrames(src, dst link.Endpoint, payload, n int) ([][]byte, error) {
	sa, da := firstAddr(src), firstAddr(dst)
	if !sa.IsValid() || !da.IsValid() || sa.Is4() != da.Is4() {
		return nil, fmt.Errorf("bench: ceiling needs two IP endpoints of one family, have %v and %v", src.Addrs(), dst.Addrs())
	}
	if src.Format() != link.FormatIP {
		return nil, fmt.Errorf("bench: ceiling needs an IP link, have %v", src.Format())
	}
	a := &wire.Addr{Kind: wire.KindRoCEv2IPv6, SrcIP: sa, DstIP: da, HopLimit: 64, DontFragment: true, SrcPort: 0xC000}
	if sa.Is4() {
		a.Kind = wire.KindRoCEv2IPv4
	}
	if sp, ok := src.(link.SourcePorter); ok {
		a.SrcPort = sp.SourcePort()
	}
	hr := a.Headroom(wire.FramingIP)
	frames := make([][]byte, n)
	for i := range frames {
		m := bth.HeaderLen + payload
		buf := make([]byte, hr+m+wire.Tailroom)
		bth.Header(buf[hr:]).Encode(&bth.Fields{Opcode: bth.OpRCRDMAWriteMiddle, PKey: 0xFFFF, DestQP: 0x11, PSN: bth.PSN(i)})
		for j := range payload {
			buf[hr+bth.HeaderLen+j] = byte(i + j)
		}
		f, err := wire.Finish(buf, hr, m, wire.FramingIP, a)
		if err != nil {
			return nil, err
		}
		frames[i] = f
	}
	return frames, nil
}

func firstAddr(e link.Endpoint) (a netip.Addr) {
	if as := e.Addrs(); len(as) > 0 {
		a = as[0]
	}
	return a
}
