package bench

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/transport"
)

// The Go benchmarks run the same Sessions as goroce bench, connected in
// memory instead of over TCP, on two links: memlink (no system calls: the
// HCA's own cost) and the udp link on 127.0.0.1 -> 127.0.0.2 inside a fresh
// network namespace (root only; skipped otherwise).
//
//	go test -run '^$' -bench . -benchtime 2s ./bench

// newNetNS creates a network namespace with lo up and returns a function
// that runs f on a thread inside it (sockets f opens stay in it).
func newNetNS(tb testing.TB) func(f func()) {
	tb.Helper()
	netcfg.SkipUnlessRoot(tb)
	ns, err := netcfg.NewNetNS("")
	if err != nil {
		tb.Fatalf("network namespace: %v", err)
	}
	tb.Cleanup(func() { ns.Close() })
	return func(f func()) {
		if err := ns.Do(func() error { f(); return nil }); err != nil {
			tb.Fatalf("entering the namespace: %v", err)
		}
	}
}

// udpPair opens two devices on the udp link, 127.0.0.1 and 127.0.0.2, in a
// fresh namespace, with the shards goroce bench --loopback gives a run of
// qps QPs (hca.PeerShards).
func udpPair(tb testing.TB, qps int) (*hca.Device, *hca.Device) {
	tb.Helper()
	do := newNetNS(tb)
	var ea, eb link.Endpoint
	var err error
	do(func() {
		if ea, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.1")}); err != nil {
			return
		}
		eb, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.2")})
	})
	if err != nil {
		if ea != nil {
			ea.Close()
		}
		tb.Fatal(err)
	}
	shards := hca.PeerShards(qps)
	da, err := hca.Open(ea, hca.Options{Name: "goroce0", Shards: shards})
	if err != nil {
		tb.Fatal(err)
	}
	db, err := hca.Open(eb, hca.Options{Name: "goroce1", Shards: shards})
	if err != nil {
		da.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { da.Close(); db.Close() })
	return da, db
}

// links are the device pairs the Go benchmarks run on; open takes the
// run's QP count.
var links = []struct {
	name string
	open func(tb testing.TB, qps int) (*hca.Device, *hca.Device)
}{{"memlink", func(tb testing.TB, _ int) (*hca.Device, *hca.Device) { return memPair(tb) }}, {"udp", udpPair}}

// benchBW runs b.N messages of size (spread over the QPs) and reports GB/s
// and Mpps.
func benchBW(b *testing.B, open func(testing.TB, int) (*hca.Device, *hca.Device), m Mode, size, qps int) {
	da, db := open(b, qps)
	iters := (b.N + qps - 1) / qps
	cli, srv := connected(b, da, db, Params{Mode: m, Size: size, Iters: iters, QPs: qps})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	rc, _ := runBoth(b, ctx, cli, srv, size)
	b.StopTimer()
	r := rc.BW
	b.ReportMetric(r.BytesPerSec/1e9, "GB/s")
	b.ReportMetric(r.MsgPerSec/1e6, "Mpps")
}

func BenchmarkWriteBW64K(b *testing.B) {
	for _, l := range links {
		b.Run(l.name, func(b *testing.B) { benchBW(b, l.open, ModeWriteBW, 65536, 1) })
	}
}

// BenchmarkBW covers the other bandwidth modes at 64 KiB and 4 KiB, and
// the aggregate of 16 QPs against 1.
func BenchmarkBW(b *testing.B) {
	for _, l := range links {
		for _, m := range []Mode{ModeWriteBW, ModeReadBW, ModeSendBW} {
			for _, size := range []int{4096, 65536} {
				b.Run(fmt.Sprintf("%s/%s/%d", l.name, m, size), func(b *testing.B) { benchBW(b, l.open, m, size, 1) })
			}
		}
		b.Run(l.name+"/atomic_bw", func(b *testing.B) { benchBW(b, l.open, ModeAtomicBW, 8, 1) })
		for _, qps := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/write_bw/65536/qps=%d", l.name, qps), func(b *testing.B) { benchBW(b, l.open, ModeWriteBW, 65536, qps) })
		}
	}
}

// BenchmarkLat runs b.N ping-pongs and reports perftest's latency figures.
func BenchmarkLat(b *testing.B) {
	for _, l := range links {
		for _, m := range []Mode{ModeSendLat, ModeWriteLat, ModeReadLat} {
			b.Run(l.name+"/"+m.String(), func(b *testing.B) {
				da, db := l.open(b, 1)
				cli, srv := connected(b, da, db, Params{Mode: m, Iters: b.N})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				b.ReportAllocs()
				b.ResetTimer()
				rc, _ := runBoth(b, ctx, cli, srv, 2)
				b.StopTimer()
				us := func(d time.Duration) float64 { return float64(d) / 1e3 }
				b.ReportMetric(us(rc.Lat.Typical), "p50-µs")
				b.ReportMetric(us(rc.Lat.P99), "p99-µs")
				b.ReportMetric(us(rc.Lat.Avg), "avg-µs")
			})
		}
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkMemory reports the heap cost of one connected RC QP (QP, its
// share of the CQs, perftest's attributes, in RTS; without the registered
// data buffer, which is the application's) and of one outstanding send WR
// (posted to a peer that never answers, so it stays queued).
func BenchmarkMemory(b *testing.B) {
	const nQP, nWR = 512, 4096
	var perQP, perWR float64
	for b.Loop() {
		da, db := memPair(b)
		pa, _ := da.AllocPD()
		pb, _ := db.AllocPD()
		mk := func(d *hca.Device, pd *hca.PD) ([]*hca.QP, error) {
			cq, err := d.CreateCQ(nQP)
			if err != nil {
				return nil, err
			}
			var qs []*hca.QP
			for range nQP {
				q, err := pd.CreateQP(hca.QPInitAttr{Type: hca.RC, SendCQ: cq, RecvCQ: cq,
					Cap: hca.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
				if err != nil {
					return nil, err
				}
				qs = append(qs, q)
			}
			return qs, nil
		}
		before := heapInUse()
		qa, err := mk(da, pa)
		if err != nil {
			b.Fatal(err)
		}
		qb, err := mk(db, pb)
		if err != nil {
			b.Fatal(err)
		}
		for i := range qa {
			if err := connectRC(da, db, qa[i], qb[i]); err != nil {
				b.Fatal(err)
			}
		}
		perQP = float64(heapInUse()-before) / (2 * nQP)

		// Outstanding WRs: A's link drops everything, so no ACK returns.
		a, z, err := memlink.Pair(memlink.Config{AtoB: memlink.Faults{Loss: 1},
			AddrsA: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, AddrsB: []netip.Addr{netip.MustParseAddr("192.0.2.2")}})
		if err != nil {
			b.Fatal(err)
		}
		dx, _ := hca.Open(a, hca.Options{})
		dz, _ := hca.Open(z, hca.Options{})
		p := Params{Mode: ModeWriteBW, Size: 64, Iters: nWR, TxDepth: nWR}
		cli, srv := connected(b, dx, dz, p)
		if err := cli.Ready(64); err != nil {
			b.Fatal(err)
		}
		r := cli.qps[0]
		before = heapInUse()
		for i := range nWR {
			r.wr.ID, r.wr.Flags = uint64(i), 0
			if err := r.qp.PostSend(&r.wr); err != nil {
				b.Fatal(err)
			}
		}
		perWR = float64(heapInUse()-before) / nWR
		cli.Close()
		srv.Close()
		dx.Close()
		dz.Close()
	}
	b.ReportMetric(perQP, "B/QP")
	b.ReportMetric(perWR, "B/WR")
}

// connectRC connects qa and qb with perftest's attributes (through a
// Session-less path: the QPs have no buffers).
func connectRC(da, db *hca.Device, qa, qb *hca.QP) error {
	for _, x := range []struct {
		q    *hca.QP
		d, r *hca.Device
		rq   *hca.QP
	}{{qa, da, db, qb}, {qb, db, da, qa}} {
		var a hca.QPAttr
		a.State, a.Port, a.AccessFlags = hca.StateInit, 1, hca.AccessRemoteWrite
		if err := x.q.Modify(&a, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags); err != nil {
			return err
		}
		g, _ := x.r.QueryGID(0)
		a = hca.QPAttr{AH: hca.AHAttr{DGID: g, HopLimit: hopLimit}, Port: 1}
		a.State, a.PathMTU, a.DestQPN, a.RQPSN, a.MaxDestRdAtomic, a.MinRNRTimer = hca.StateRTR, x.d.QueryPort().ActiveMTU, x.rq.QPN(), 1, 1, minRNRTimer
		if err := x.q.Modify(&a, transport.AttrState|transport.AttrAV|transport.AttrPathMTU|transport.AttrDestQPN|transport.AttrRQPSN|transport.AttrMaxDestRdAtomic|transport.AttrMinRNRTimer); err != nil {
			return err
		}
		a = hca.QPAttr{}
		a.State, a.SQPSN, a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = hca.StateRTS, 1, DefaultTimeout, retryCount, retryCount, 1
		if err := x.q.Modify(&a, transport.AttrState|transport.AttrSQPSN|transport.AttrTimeout|transport.AttrRetryCnt|transport.AttrRNRRetry|transport.AttrMaxQPRdAtomic); err != nil {
			return err
		}
	}
	return nil
}

// TestBWClientAllocs checks the bandwidth loop allocates nothing per
// message: the allocations of a 2000-message run and a 200-message run
// differ by less than one per 100 messages.
func TestBWClientAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counting runs thousands of messages")
	}
	da, db := memPair(t)
	ctx := testCtx(t)
	allocs := func(iters int) float64 {
		cli, srv := connected(t, da, db, Params{Mode: ModeWriteBW, Size: 64, Iters: iters})
		defer cli.Close()
		defer srv.Close()
		runBoth(t, ctx, cli, srv, 64) // warm up
		return testing.AllocsPerRun(5, func() {
			if err := cli.Ready(64); err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Run(ctx, 64); err != nil {
				t.Fatal(err)
			}
		})
	}
	small, large := allocs(200), allocs(2000)
	if per := (large - small) / 1800; per > 0.01 {
		t.Fatalf("%.3f allocations per message (%.0f for 200 messages, %.0f for 2000)", per, small, large)
	}
	t.Logf("allocations per run: %.0f (200 messages), %.0f (2000 messages)", small, large)
}
