package hca_test

import (
	"bytes"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/wire"
)

// After MR.Dereg returns, no engine touches the MR's buffer: a peer that
// had started an RDMA WRITE or READ on it before the Dereg is refused from
// its next packet. (The engines used to keep the buffer the RETH resolved
// to for the rest of the message.)

// derefPkt builds a transport packet (BTH through the pad, no ICRC) from
// the hostile peer of the fuzz device.
func derefPkt(op bth.Opcode, dest bth.QPN, psn bth.PSN, payload []byte, ackReq bool, va uint64, rkey bth.RKey, dmaLen uint32) []byte {
	oi := op.Info()
	pad := -len(payload) & 3
	t := make([]byte, oi.HdrLen+len(payload)+pad)
	bth.Header(t).Encode(&bth.Fields{Opcode: op, PadCnt: pad, PKey: bth.DefaultPKey, DestQP: dest, AckReq: ackReq, PSN: psn})
	copy(t[oi.HdrLen:], payload)
	if oi.RETH != 0 {
		r := bth.RETH(t[oi.RETH:])
		r.SetVA(va)
		r.SetRKey(rkey)
		r.SetDMALen(dmaLen)
	}
	return t
}

// waitRxPackets waits until q's engine has counted n received packets.
func waitRxPackets(t *testing.T, q *hca.QP, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); q.Stats().RxPackets < n; time.Sleep(50 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("QP received %d packets, want %d", q.Stats().RxPackets, n)
		}
	}
}

// TestDeregStopsWriteInProgress: the peer sends WRITE_FIRST, the owner
// deregisters the MR, the peer sends WRITE_LAST. The LAST must not land in
// the buffer; the QP NAKs it (remote access error) and leaves RTS.
func TestDeregStopsWriteInProgress(t *testing.T) {
	fd := newFuzzDeviceTimeout(t, fzIP, 18)
	defer fd.close()
	rc := fd.rc.QPN()
	va := fd.mr1.Addr() + fzWriteAt
	first := bytes.Repeat([]byte{0xAA}, fzMTUBytes)
	last := bytes.Repeat([]byte{0xBB}, 20)
	fd.feed(t, fzRecord(0, derefPkt(bth.OpRCRDMAWriteFirst, rc, fzPSNRC, first, false, va, fd.mr1.RKey(), fzMTUBytes+20)))
	waitRxPackets(t, fd.rc, 1)
	if got := fd.mem[fzMR1+fzWriteAt]; got != 0xAA {
		t.Fatalf("WRITE_FIRST not placed (byte %#x)", got)
	}
	if err := fd.mr1.Dereg(); err != nil {
		t.Fatal(err)
	}
	tail := fd.mem[fzMR1+fzWriteAt+fzMTUBytes : fzMR1+fzWriteAt+fzMTUBytes+20]
	before := bytes.Clone(tail)
	fd.feed(t, fzRecord(0, derefPkt(bth.OpRCRDMAWriteLast, rc, fzPSNRC.Add(1), last, true, 0, 0, 0)))
	waitRxPackets(t, fd.rc, 2)
	if !bytes.Equal(before, tail) {
		t.Fatalf("WRITE_LAST received after Dereg wrote into the deregistered buffer: %x -> %x (state %v)", before, tail, fd.rc.State())
	}
	if st := fd.rc.State(); st != hca.StateErr {
		t.Fatalf("QP state %v after a WRITE into a deregistered MR, want ERR", st)
	}
}

// gateEndpoint holds the first link write after armed is set until
// release is closed.
type gateEndpoint struct {
	link.Endpoint
	armed   atomic.Bool
	blocked chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gateEndpoint) Write(bufs [][]byte, off int) (int, error) {
	if g.armed.Load() {
		g.once.Do(func() { close(g.blocked); <-g.release })
	}
	return g.Endpoint.Write(bufs, off)
}

// TestDeregStopsReadResponse: a READ of eight packets is being answered;
// the device's first link write is held while the owner deregisters the
// MR, and once Dereg has returned the owner overwrites the buffer with
// 0xEE. No response packet may carry 0xEE: the stream either was complete
// before Dereg returned or ends in a NAK, remote access error.
func TestDeregStopsReadResponse(t *testing.T) {
	raw, b, err := memlink.Pair(memlink.Config{AddrsA: []netip.Addr{addrA}, AddrsB: []netip.Addr{addrB},
		QueueLen: 4096, BatchSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	gate := &gateEndpoint{Endpoint: b, blocked: make(chan struct{}), release: make(chan struct{})}
	dev, err := hca.Open(gate, hca.Options{Name: "dereg", Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate.release) }) }
	defer func() { release(); dev.Close(); raw.Close() }()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{0x11}, 16<<10)
	mr, err := pd.RegMR(buf, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq,
		Cap: hca.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	sgid := -1
	for _, g := range dev.GIDs() {
		if g.GID == hca.GID(wire.GIDFromAddr(addrB)) {
			sgid = g.Index
		}
	}
	if err := fzConnect(qp, sgid, fzPeerRC, fzPSNRC, 18); err != nil {
		t.Fatal(err)
	}

	const n = 8 * fzMTUBytes // eight response packets
	req := derefPkt(bth.OpRCRDMAReadRequest, qp.QPN(), fzPSNRC, nil, true, mr.Addr(), mr.RKey(), n)
	frame := (&fuzzDevice{framing: fzIP}).frame(make([]byte, 2*fzPage), 0, req)
	gate.armed.Store(true)
	if _, err := raw.Write([][]byte{frame}, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gate.blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("no READ response sent")
	}
	// The held write is under the QP's lock (a full batch is flushed as
	// it fills), and Dereg must wait for that lock: it may not return while
	// the responder is between resolving the MR and copying from it.
	dereg := make(chan error, 1)
	go func() { dereg <- mr.Dereg() }()
	select {
	case err := <-dereg:
		t.Fatalf("Dereg returned (%v) while the responder held its QP's lock in a link write", err)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	if err := <-dereg; err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 0xEE // written after Dereg returned: the peer must not see it
	}

	type pkt struct {
		op      bth.Opcode
		syn     bth.Syndrome
		payload []byte
	}
	got := make(chan pkt, 16)
	go func() {
		defer close(got)
		bufs := [][]byte{make([]byte, 2*fzPage)}
		sizes := []int{0}
		for {
			k, err := raw.Read(bufs, sizes, 0)
			if err != nil {
				return
			}
			if k == 0 {
				continue
			}
			var p wire.Packet
			if p.Decode(bufs[0][:sizes[0]], wire.FramingIP) != nil {
				continue
			}
			tr := p.Transport()
			h := bth.Header(tr)
			oi := h.Opcode().Info()
			if !oi.Has(bth.FlagResp) {
				continue
			}
			var syn bth.Syndrome
			if oi.AETH != 0 {
				syn = bth.AETH(tr[oi.AETH:]).Syndrome()
			}
			got <- pkt{h.Opcode(), syn, bytes.Clone(tr[oi.HdrLen : len(tr)-h.PadCnt()])}
		}
	}()
	var responses int
	timeout := time.After(5 * time.Second)
	for {
		select {
		case p, ok := <-got:
			if !ok {
				t.Fatal("raw link closed")
			}
			if p.op == bth.OpRCAcknowledge {
				if p.syn.IsACK() || p.syn.NAKCode() != bth.NAKRemoteAccessError {
					t.Fatalf("after %d READ responses: ACK/NAK syndrome %v, want NAK remote access error", responses, p.syn)
				}
				if responses == 8 {
					t.Fatal("all eight responses were sent, then a NAK")
				}
				if st := qp.State(); st != hca.StateErr {
					t.Fatalf("QP state %v after the NAK, want ERR", st)
				}
				return
			}
			responses++
			if bytes.IndexByte(p.payload, 0xEE) >= 0 {
				t.Fatalf("READ response %d (%v) carried bytes written into the buffer after Dereg returned", responses, p.op)
			}
			if responses == 8 {
				return // the whole stream left before Dereg returned
			}
		case <-timeout:
			t.Fatalf("%d READ responses and no NAK", responses)
		}
	}
}
