package hca_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/transport"
)

// udpDevicesN opens one device per options on 127.0.0.1, .2, ... of a
// fresh namespace (closed when t ends).
func udpDevicesN(t *testing.T, opts ...hca.Options) []*hca.Device {
	t.Helper()
	ns := testNS(t)
	devs := make([]*hca.Device, len(opts))
	for i, o := range opts {
		var ep *udp.Endpoint
		if err := ns.Do(func() error {
			var err error
			ep, err = udp.Open(udp.Config{Addr: netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)})})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		o.Name = fmt.Sprintf("inl%d", i)
		d, err := hca.Open(ep, o)
		if err != nil {
			ep.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	return devs
}

// stream keeps depth RDMA WRITEs of size bytes from a to b outstanding for
// msgs messages, each of its own content at its own offset of b's buffer,
// then reads b's buffer back with RDMA READs and compares; a SEND closes
// the exchange. Everything a peer sends back (ACKs, read responses) and
// everything it sends on its own must arrive whole, in order, once.
func stream(a, b *end, id, size, depth, msgs int) error {
	slots := len(a.buf) / size / 2 // first half: sources; second half: read-back
	posted, done := 0, 0
	post := func(m int) error {
		k := m % slots
		src := a.buf[k*size : (k+1)*size]
		fill(src, byte(m*13+id))
		return a.qp.PostSend(&hca.SendWR{ID: uint64(m), Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.mr.SGE(k*size, size)}, RemoteAddr: b.mr.Addr() + uint64(k*size), RKey: b.mr.RKey()})
	}
	for done < msgs {
		// A slot's source is rewritten only once its last WRITE completed.
		for posted < msgs && posted-done < min(depth, slots) {
			if err := post(posted); err != nil {
				return err
			}
			posted++
		}
		wc, err := wcWithin(a.cq, 30*time.Second)
		if err != nil {
			return fmt.Errorf("stream %d after %d of %d: %w", id, done, msgs, err)
		}
		if wc.Status != transport.StatusSuccess || wc.WRID != uint64(done) {
			return fmt.Errorf("stream %d: completion %+v, want WR %d success", id, wc, done)
		}
		done++
	}
	// The last slots hold the last messages: read them back.
	base := slots * size
	for k := range slots {
		if err := a.qp.PostSend(&hca.SendWR{ID: uint64(1000000 + k), Opcode: transport.WRRDMARead, Flags: transport.SendSignaled,
			SGL: []hca.SGE{a.mr.SGE(base+k*size, size)}, RemoteAddr: b.mr.Addr() + uint64(k*size), RKey: b.mr.RKey()}); err != nil {
			return err
		}
	}
	for k := range slots {
		wc, err := wcWithin(a.cq, 30*time.Second)
		if err != nil || wc.Status != transport.StatusSuccess || wc.WRID != uint64(1000000+k) {
			return fmt.Errorf("stream %d read %d: %+v %v", id, k, wc, err)
		}
	}
	for k := range slots {
		if !bytes.Equal(a.buf[base+k*size:base+(k+1)*size], a.buf[k*size:(k+1)*size]) ||
			!bytes.Equal(b.buf[k*size:(k+1)*size], a.buf[k*size:(k+1)*size]) {
			return fmt.Errorf("stream %d: slot %d differs after the writes and the read-back", id, k)
		}
	}
	if err := b.qp.PostRecv(&hca.RecvWR{ID: 7, SGL: []hca.SGE{b.mr.SGE(base, 64)}}); err != nil {
		return err
	}
	if err := a.qp.PostSend(&hca.SendWR{ID: 8, Opcode: transport.WRSend, Flags: transport.SendSignaled, SGL: []hca.SGE{a.mr.SGE(0, 64)}}); err != nil {
		return err
	}
	for _, e := range []*end{b, a} {
		if wc, err := wcWithin(e.cq, 30*time.Second); err != nil || wc.Status != transport.StatusSuccess {
			return fmt.Errorf("stream %d closing SEND: %+v %v", id, wc, err)
		}
	}
	return nil
}

// In-process peers receive each other's packets inline (hca/inline.go):
// streams in both directions at once, over several shards, and from a
// third device that does not take part (NoInlinePeers) to one that does,
// deliver every message intact and in order; the inline receive is used
// exactly where it may be. Run with -race: the sending goroutines then
// process the peers' packets under the peers' own locks. Four shards is
// what goroce bench --loopback runs on two Ps (hca.PeerShards).
func TestInlinePeers(t *testing.T) {
	for _, c := range []struct {
		shards int
		off    bool
	}{{2, false}, {2, true}, {4, false}} {
		t.Run(fmt.Sprintf("Shards=%d/NoInlinePeers=%v", c.shards, c.off), func(t *testing.T) {
			o := hca.Options{Shards: c.shards, NoInlinePeers: c.off}
			devs := udpDevicesN(t, o, o, hca.Options{Shards: c.shards, NoInlinePeers: true})
			da, db, dc := devs[0], devs[1], devs[2]
			type job struct {
				a, b *end
				size int
			}
			var jobs []job
			// Four streams each way, created so that each device sends
			// data from both of its shards (QPN mod 2): the inline
			// receive runs only while as many shards send as there are
			// CPUs for them (inlineNow).
			for i := range 8 {
				x, y := da, db
				if i >= 4 {
					x, y = db, da // the other direction
				}
				a := newEnd(t, x, hca.RC, 16<<16, allAccess)
				b := newEnd(t, y, hca.RC, 16<<16, allAccess)
				connect(t, a, b, bth.MTU4096, bth.PSN(i*77), bth.PSN(0xFFFFF0-i))
				jobs = append(jobs, job{a, b, 64 << 10})
			}
			// c takes no part: its packets to b are read by b's goroutine.
			a := newEnd(t, dc, hca.RC, 16<<12, allAccess)
			b := newEnd(t, db, hca.RC, 16<<12, allAccess)
			connect(t, a, b, bth.MTU1024, 5, 6)
			jobs = append(jobs, job{a, b, 4 << 10})

			var wg sync.WaitGroup
			errs := make(chan error, len(jobs))
			for i, j := range jobs {
				wg.Go(func() { errs <- stream(j.a, j.b, i, j.size, 32, 300) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			for _, d := range devs {
				c := &d.Counters
				if n := c.RxUnknownQP.Load() + c.RxICRCErrors.Load() + c.RxMalformed.Load() + c.RxWrongAddress.Load(); n != 0 {
					t.Errorf("%s dropped %d frames", d.Name(), n)
				}
			}
			for _, d := range []*hca.Device{da, db} {
				if n := d.Counters.RxInline.Load(); c.off && n != 0 || !c.off && n == 0 {
					t.Errorf("%s: %d frames received inline with NoInlinePeers %v", d.Name(), n, c.off)
				}
			}
			if n := dc.Counters.RxInline.Load(); n != 0 {
				t.Errorf("%s (NoInlinePeers) had %d frames received inline", dc.Name(), n)
			}
		})
	}
}

// One stream on a device with two shards and two CPUs keeps the pipeline
// of sending goroutine and peer reader goroutine on two cores: no inline
// receive (inlineNow), which would run both on one.
func TestInlinePeersOneStream(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one CPU: the inline receive is always on")
	}
	devs := udpDevicesN(t, hca.Options{Shards: 2}, hca.Options{Shards: 2})
	a := newEnd(t, devs[0], hca.RC, 16<<16, allAccess)
	b := newEnd(t, devs[1], hca.RC, 16<<16, allAccess)
	connect(t, a, b, bth.MTU4096, 1, 2)
	if err := stream(a, b, 0, 64<<10, 32, 300); err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if n := d.Counters.RxInline.Load(); n != 0 {
			t.Errorf("%s: %d frames received inline from one stream", d.Name(), n)
		}
	}
}

// The inline receive allocates nothing per message: a pipelined stream of
// RDMA WRITEs between in-process peers (one shard each, so that it always
// runs) allocates, over the whole process, less than one object per 100
// messages more for 2000 messages than for 200.
func TestInlinePeersAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counting runs thousands of messages")
	}
	devs := udpDevicesN(t, hca.Options{Shards: 1}, hca.Options{Shards: 1})
	a := newEnd(t, devs[0], hca.RC, 1<<16, allAccess)
	b := newEnd(t, devs[1], hca.RC, 1<<16, allAccess)
	connect(t, a, b, bth.MTU4096, 1, 2)
	wr := hca.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 16<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	run := func(msgs int) { pipeWrites(t, a, &wr, 16, msgs) }
	run(500) // warm up
	small := testing.AllocsPerRun(3, func() { run(200) })
	large := testing.AllocsPerRun(3, func() { run(2000) })
	if per := (large - small) / 1800; per > 0.01 {
		t.Fatalf("%.3f allocations per message (%.0f for 200 messages, %.0f for 2000)", per, small, large)
	}
	if devs[1].Counters.RxInline.Load() == 0 {
		t.Fatal("no frame was received inline")
	}
	t.Logf("allocations per run: %.0f (200 messages), %.0f (2000 messages)", small, large)
}

// A peer closed under a stream leaves its receive queue to the senders'
// QPs (QP.inlineTo): their retransmissions still try the inline receive,
// which must find the closed link and go on, and the unacknowledged WRITE
// must not complete.
func TestInlinePeerClosed(t *testing.T) {
	devs := udpDevicesN(t, hca.Options{Shards: 1}, hca.Options{Shards: 1})
	a := newEnd(t, devs[0], hca.RC, 1<<16, allAccess)
	b := newEnd(t, devs[1], hca.RC, 1<<16, allAccess)
	rcTimeout = 8 // 1 ms: retransmissions while the test waits
	defer func() { rcTimeout = 14 }()
	connect(t, a, b, bth.MTU4096, 1, 2)
	if err := stream(a, b, 0, 16<<10, 8, 50); err != nil {
		t.Fatal(err)
	}
	before := devs[1].Counters.RxInline.Load()
	if before == 0 {
		t.Fatal("no frame was received inline before the close")
	}
	if err := devs[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&hca.SendWR{ID: 99, Opcode: transport.WRRDMAWrite, Flags: transport.SendSignaled,
		SGL: []hca.SGE{a.mr.SGE(0, 16<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		var wc [1]hca.WC
		if n, err := a.cq.Poll(wc[:]); err != nil || n != 0 {
			t.Fatalf("a WRITE to a closed peer completed: %d %+v %v", n, wc[0], err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := devs[1].Counters.RxInline.Load(); n != before {
		t.Errorf("%d frames received inline by a closed device", n-before)
	}
}

// PeerShards gives in-process peers up to twice as many shards as Ps where
// there are QPs for them, at most four, never fewer than the default, and
// one on one P.
func TestPeerShards(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct{ procs, qps, want int }{
		{1, 1, 1}, {1, 16, 1},
		{2, 1, 2}, {2, 2, 2}, {2, 3, 3}, {2, 16, 4},
		{3, 1, 3}, {3, 16, 4}, {4, 16, 4}, {16, 1, 4}, {16, 64, 4},
	} {
		runtime.GOMAXPROCS(c.procs)
		if got := hca.PeerShards(c.qps); got != c.want {
			t.Errorf("GOMAXPROCS %d, %d QPs: PeerShards %d, want %d", c.procs, c.qps, got, c.want)
		}
	}
}
