package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"image"
	_ "image/png"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
	"github.com/goroce/goroce/internal/pcaptest"
)

// memPair opens two devices joined by an in-memory link.
func memPair(t testing.TB) (*hca.Device, *hca.Device) {
	return memPairFaults(t, memlink.Faults{})
}

// memPairFaults is memPair with faults on the link from the first device
// to the second.
func memPairFaults(t testing.TB, aToB memlink.Faults) (*hca.Device, *hca.Device) {
	t.Helper()
	a, b, err := memlink.Pair(memlink.Config{QueueLen: 4096, Seed: 7, AtoB: aToB,
		AddrsA: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, AddrsB: []netip.Addr{netip.MustParseAddr("192.0.2.2")}})
	if err != nil {
		t.Fatal(err)
	}
	da, err := hca.Open(a, hca.Options{Name: "goroce0"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := hca.Open(b, hca.Options{Name: "goroce1"})
	if err != nil {
		da.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	return da, db
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// loopback runs p over perftest's TCP exchange between two memlink devices.
func loopback(t *testing.T, p Params) (client, server *Report) {
	t.Helper()
	da, db := memPair(t)
	c, s, err := RunLoopback(testCtx(t), da, db, p, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

func checkBW(t *testing.T, r Result, size, iters, qps int) {
	t.Helper()
	b := r.BW
	if r.Passive || b.Size != size || b.Iters != iters || b.QPs != qps || b.Messages != iters*qps {
		t.Fatalf("result %+v, want size %d, %d iterations on %d QPs", r, size, iters, qps)
	}
	// A peak of 0 is "none" (-N, -D, a send_bw server); any other is at
	// least the average.
	if !(b.BytesPerSec > 0 && b.MsgPerSec > 0 && (b.PeakBytesPerSec == 0 || b.PeakBytesPerSec >= b.BytesPerSec) && b.Duration > 0) {
		t.Fatalf("rates %+v", b)
	}
}

func checkLat(t *testing.T, r Result, size, iters int) {
	t.Helper()
	l := r.Lat
	if l.Size != size || l.Iters != iters {
		t.Fatalf("latency result %+v, want size %d, %d iterations", l, size, iters)
	}
	if !(l.Min > 0 && l.Min <= l.Typical && l.Typical <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max && l.Avg >= l.Min && l.Avg <= l.Max) {
		t.Fatalf("latency statistics out of order: %+v", l)
	}
}

// TestModes runs every mode goroce against goroce over the TCP exchange.
func TestModes(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		size int
	}{
		{Params{Mode: ModeSendBW, Iters: 40, Size: 5000}, 5000},
		{Params{Mode: ModeWriteBW, Iters: 40, Size: 9000}, 9000},
		{Params{Mode: ModeReadBW, Iters: 40, Size: 3000}, 3000},
		{Params{Mode: ModeAtomicBW, Iters: 40}, 8},
		{Params{Mode: ModeAtomicBW, Iters: 40, Atomic: CmpAndSwap}, 8},
		{Params{Mode: ModeSendLat, Iters: 40}, 2},
		{Params{Mode: ModeWriteLat, Iters: 40, Size: 4097}, 4097},
		{Params{Mode: ModeReadLat, Iters: 40, Size: 100}, 100},
	} {
		t.Run(tc.p.Mode.String()+"/"+tc.p.Atomic.String(), func(t *testing.T) {
			c, s := loopback(t, tc.p)
			if len(c.Results) != 1 || len(s.Results) != 1 {
				t.Fatalf("%d client and %d server results", len(c.Results), len(s.Results))
			}
			if c.Remote[0].QPN != s.Local[0].QPN || s.Remote[0].QPN != c.Local[0].QPN || c.MTU != s.MTU {
				t.Fatalf("sides disagree: client %+v server %+v", c, s)
			}
			if tc.p.Mode.IsBW() {
				checkBW(t, c.Results[0], tc.size, 40, 1)
				// The passive servers print the client's report (xchg_bw_reports);
				// the send_bw server measures its own receives.
				checkBW(t, s.Results[0], tc.size, 40, 1)
				if c.Results[0].BW.PeakBytesPerSec == 0 {
					t.Fatalf("client: no peak without -N or -D")
				}
				if tc.p.Mode == ModeSendBW && s.Results[0].BW.PeakBytesPerSec != 0 {
					t.Fatalf("send_bw server: peak %v; perftest's prints 0.00", s.Results[0].BW.PeakBytesPerSec)
				}
				if tc.p.Mode.oneSided() && s.Results[0].BW.BytesPerSec != c.Results[0].BW.BytesPerSec {
					t.Fatalf("server shows %v B/s, client measured %v", s.Results[0].BW.BytesPerSec, c.Results[0].BW.BytesPerSec)
				}
				return
			}
			checkLat(t, c.Results[0], tc.size, 40)
		})
	}
}

// TestDuplex runs -b in every bandwidth mode: both sides move Iters
// messages each way, and each reports the sum of both directions
// (print_full_bw_report with the peer's report).
func TestDuplex(t *testing.T) {
	for _, p := range []Params{
		{Mode: ModeSendBW, Iters: 300, Size: 5000, Duplex: true},
		{Mode: ModeSendBW, Iters: 200, Size: 3000, Duplex: true, QPs: 3, RxDepth: 16, TxDepth: 8},
		{Mode: ModeWriteBW, Iters: 300, Size: 9000, Duplex: true},
		{Mode: ModeReadBW, Iters: 300, Size: 3000, Duplex: true, QPs: 2},
		{Mode: ModeAtomicBW, Iters: 300, Duplex: true},
		{Mode: ModeWriteBW, Iters: 20, Duplex: true, All: true, MaxSize: 1 << 13},
		{Mode: ModeSendBW, Iters: 20, Duplex: true, All: true, MaxSize: 1 << 13},
		{Mode: ModeReadBW, Iters: 20, Duplex: true, All: true, MaxSize: 1 << 13, QPs: 2},
	} {
		t.Run(p.Mode.String(), func(t *testing.T) {
			da, db := memPair(t)
			c, s, err := RunLoopback(testCtx(t), da, db, p, Hooks{})
			if err != nil {
				t.Fatal(err)
			}
			n := p
			if err := n.Normalize(); err != nil {
				t.Fatal(err)
			}
			sizes := n.Sizes()
			for _, r := range []*Report{c, s} {
				if len(r.Results) != len(sizes) {
					t.Fatalf("%d results, want %d", len(r.Results), len(sizes))
				}
				for i, size := range sizes {
					checkBW(t, r.Results[i], size, p.Iters, max(p.QPs, 1))
				}
			}
			// Each side's figure is its own plus the other's: equal sums.
			for i := range sizes {
				cb, sb := c.Results[i].BW, s.Results[i].BW
				if math.Abs(cb.BytesPerSec-sb.BytesPerSec) > 1e-9*cb.BytesPerSec || math.Abs(cb.MsgPerSec-sb.MsgPerSec) > 1e-9*cb.MsgPerSec {
					t.Fatalf("size %d: client reports %v B/s %v msg/s, server %v and %v: both should show the sum",
						cb.Size, cb.BytesPerSec, cb.MsgPerSec, sb.BytesPerSec, sb.MsgPerSec)
				}
			}
			var b strings.Builder
			PrintHeader(&b, c)
			if !strings.Contains(b.String(), " Bidirectional BW Test\n") {
				t.Fatalf("header without perftest's -b title:\n%s", b.String())
			}
			if j := ToJSON(c); !j.Bidirectional {
				t.Fatalf("JSON report does not say bidirectional")
			}
			size := sizes[len(sizes)-1]
			// Both directions carried the messages: each device sent at
			// least their bytes (one-way, the server would send ACKs only;
			// a READ's data comes back from the other side).
			want := uint64(p.Iters * max(p.QPs, 1) * size)
			for _, d := range []*hca.Device{da, db} {
				if tx := d.Counters.TxBytes.Load(); tx < want {
					t.Fatalf("device %s sent %d bytes, want at least %d", d.Name(), tx, want)
				}
			}
		})
	}
	// Timed send_bw -b exchanges no reports: each side prints its own.
	da, db := memPair(t)
	c, s, err := RunLoopback(testCtx(t), da, db, Params{Mode: ModeSendBW, Duration: time.Second, Size: 4096, Duplex: true}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Results[0].BW.Messages == 0 || s.Results[0].BW.Messages == 0 {
		t.Fatalf("-D 1 -b: client %+v server %+v", c.Results[0].BW, s.Results[0].BW)
	}
	for _, p := range []Params{{Mode: ModeSendLat, Duplex: true}, {Mode: ModeReadLat, Duplex: true}} {
		if err := p.Normalize(); !errors.Is(err, ErrParams) {
			t.Errorf("%+v: %v, want ErrParams", p, err)
		}
	}
}

// TestOutReads: -o sets the outstanding reads each side advertises in the
// exchange (and so the peer's max_rd_atomic); read and atomic modes only.
func TestOutReads(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want int
	}{
		{Params{Mode: ModeReadBW, Iters: 40, Size: 3000, OutReads: 2}, 2},
		{Params{Mode: ModeAtomicBW, Iters: 40, OutReads: 1}, 1},
		{Params{Mode: ModeReadLat, Iters: 20, OutReads: 3}, 3},
		{Params{Mode: ModeWriteBW, Iters: 20, OutReads: 5}, 1}, // perftest: 1 outside reads and atomics
	} {
		t.Run(tc.p.Mode.String(), func(t *testing.T) {
			c, s := loopback(t, tc.p)
			for _, r := range []*Report{c, s} {
				if got := int(r.Local[0].OutReads); got != tc.want {
					t.Fatalf("advertised %d outstanding reads, want %d", got, tc.want)
				}
			}
			var b strings.Builder
			PrintHeader(&b, c)
			if tc.p.Mode.usesRd() && !strings.Contains(b.String(), fmt.Sprintf(" Outstand reads  : %d\n", tc.want)) {
				t.Fatalf("header does not show %d outstanding reads:\n%s", tc.want, b.String())
			}
		})
	}
}

// TestLoopbackNamesTheFailingSide: when the server fails on its own, the
// client's broken exchange is only the consequence; RunLoopback reports
// the server's error.
func TestLoopbackNamesTheFailingSide(t *testing.T) {
	da, db := memPair(t)
	db.Close() // the server's device: only the server can fail
	_, _, err := RunLoopback(testCtx(t), da, db, Params{Mode: ModeReadBW}, Hooks{})
	if err == nil || !strings.HasPrefix(err.Error(), "server: ") {
		t.Fatalf("RunLoopback with the server's device closed: %v; want the server's error", err)
	}
}

// connected returns two Sessions of p connected in memory (no TCP), as the
// Go benchmarks use them.
func connected(t testing.TB, da, db *hca.Device, p Params) (cli, srv *Session) {
	t.Helper()
	var err error
	if cli, err = NewSession(da, p, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cli.Close)
	if srv, err = NewSession(db, p, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	mtu := min(da.QueryPort().ActiveMTU, db.QueryPort().ActiveMTU)
	if err := cli.Connect(srv.Dests(), mtu); err != nil {
		t.Fatal(err)
	}
	if err := srv.Connect(cli.Dests(), mtu); err != nil {
		t.Fatal(err)
	}
	return cli, srv
}

// runBoth runs one size on both sessions (the server in a goroutine).
func runBoth(t testing.TB, ctx context.Context, cli, srv *Session, size int) (Result, Result) {
	t.Helper()
	if err := srv.Ready(size); err != nil {
		t.Fatal(err)
	}
	if err := cli.Ready(size); err != nil {
		t.Fatal(err)
	}
	type out struct {
		r   Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		r, err := srv.Run(ctx, size)
		ch <- out{r, err}
	}()
	rc, err := cli.Run(ctx, size)
	if err != nil {
		t.Fatal(err)
	}
	o := <-ch
	if o.err != nil {
		t.Fatal(o.err)
	}
	return rc, o.r
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed ^ byte(i*7+i>>8)
	}
}

// TestDataArrives checks that the traffic is real: written, read and sent
// bytes land where perftest's would, and atomics add up.
func TestDataArrives(t *testing.T) {
	const size, iters = 10000, 30
	for _, m := range []Mode{ModeWriteBW, ModeReadBW, ModeSendBW} {
		t.Run(m.String(), func(t *testing.T) {
			da, db := memPair(t)
			cli, srv := connected(t, da, db, Params{Mode: m, Size: size, Iters: iters})
			cb, sb := cli.qps[0].mr.Bytes(), srv.qps[0].mr.Bytes()
			fill(cb[:size], 1)
			fill(sb[srv.bufSize:srv.bufSize+size], 2)
			want := append([]byte(nil), cb[:size]...)
			if m == ModeReadBW {
				want = append(want[:0], sb[srv.bufSize:srv.bufSize+size]...)
			}
			runBoth(t, testCtx(t), cli, srv, size)
			got := make([]byte, size)
			switch m {
			case ModeWriteBW, ModeSendBW:
				if err := srv.qps[0].qp.ReadMR(srv.qps[0].mr, srv.bufSize, got); err != nil || !bytes.Equal(got, want) {
					t.Fatal("the server's buffer does not hold the client's bytes")
				}
			case ModeReadBW:
				if err := cli.qps[0].qp.ReadMR(cli.qps[0].mr, 0, got); err != nil || !bytes.Equal(got, want) {
					t.Fatal("the client's buffer does not hold the server's bytes")
				}
			}
		})
	}
	t.Run("atomic_bw", func(t *testing.T) {
		da, db := memPair(t)
		cli, srv := connected(t, da, db, Params{Mode: ModeAtomicBW, Iters: 333, QPs: 2})
		runBoth(t, testCtx(t), cli, srv, 8)
		for i := range 2 {
			if v := srv.atomicValue(i); v != 333 {
				t.Fatalf("QP %d: FETCH_AND_ADD target is %d after 333 adds of 1", i, v)
			}
		}
	})
}

// TestAllSizes is -a with a small maximum: every power of two from 2, in
// every mode that allows it (send -a uses its own per-size hand-shakes).
func TestAllSizes(t *testing.T) {
	for _, m := range []Mode{ModeSendBW, ModeWriteBW, ModeReadBW, ModeSendLat, ModeWriteLat, ModeReadLat} {
		t.Run(m.String(), func(t *testing.T) {
			c, s := loopback(t, Params{Mode: m, All: true, MaxSize: 8192, Iters: 20})
			if len(c.Results) != 13 {
				t.Fatalf("%d client results, want 13 (2..8192)", len(c.Results))
			}
			for i, r := range c.Results {
				if m.IsBW() {
					checkBW(t, r, 2<<i, 20, 1)
				} else {
					checkLat(t, r, 2<<i, 20)
				}
			}
			if m == ModeSendBW && len(s.Results) != 13 {
				t.Fatalf("send_bw server has %d results, want 13", len(s.Results))
			}
		})
	}
}

func TestMultiQP(t *testing.T) {
	for _, m := range []Mode{ModeWriteBW, ModeSendBW, ModeReadBW} {
		t.Run(m.String(), func(t *testing.T) {
			c, s := loopback(t, Params{Mode: m, QPs: 4, Iters: 250, Size: 2048})
			if len(c.Local) != 4 || len(s.Remote) != 4 {
				t.Fatalf("%d local QPs, server saw %d", len(c.Local), len(s.Remote))
			}
			checkBW(t, c.Results[0], 2048, 250, 4)
			checkBW(t, s.Results[0], 2048, 250, 4)
			// perftest's #iterations counts every QP's messages
			// (ib_write_bw -q 4 -n 200 prints 800), on both sides.
			for _, r := range []*Report{c, s} {
				var b strings.Builder
				PrintResult(&b, r, r.Results[0])
				if f := strings.Fields(b.String()); len(f) < 2 || f[1] != "1000" {
					t.Fatalf("result line %q: want 1000 iterations (250 on each of 4 QPs)", b.String())
				}
			}
		})
	}
}

func TestDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	for _, m := range []Mode{ModeWriteBW, ModeSendBW} {
		t.Run(m.String(), func(t *testing.T) {
			c, _ := loopback(t, Params{Mode: m, Duration: time.Second, Size: 4096})
			b := c.Results[0].BW
			if b.Duration < time.Second || b.Duration > 3*time.Second || b.Messages == 0 || b.Messages%DefaultCQMod != 0 {
				t.Fatalf("-D 1: ran %v, %d messages (want >= 1 s and whole moderation groups)", b.Duration, b.Messages)
			}
			if b.PeakBytesPerSec != 0 {
				t.Fatalf("-D 1: peak %v B/s; perftest reports none in duration mode", b.PeakBytesPerSec)
			}
		})
	}
}

func TestParamsErrors(t *testing.T) {
	for _, p := range []Params{
		{},
		{Mode: ModeWriteBW, Size: -1},
		{Mode: ModeWriteBW, Iters: -3},
		{Mode: ModeWriteBW, QPs: -1},
		{Mode: ModeWriteBW, All: true, Duration: time.Second},
		{Mode: ModeWriteBW, All: true, MaxSize: 1 << 24},
		{Mode: ModeAtomicBW, Size: 16},
		{Mode: ModeAtomicBW, Size: 65536}, // the bandwidth default, but given
		{Mode: ModeAtomicBW, All: true},
		{Mode: ModeWriteBW, TxDepth: 1 << 20},
		{Mode: ModeWriteBW, Timeout: 32},
		{Mode: ModeWriteBW, MTU: 9},
	} {
		if err := p.Normalize(); !errors.Is(err, ErrParams) {
			t.Errorf("%+v: error %v, want ErrParams", p, err)
		}
	}
	da, _ := memPair(t)
	if _, err := NewSession(da, Params{Mode: ModeSendLat, QPs: 2}, true); !errors.Is(err, ErrParams) {
		t.Errorf("latency with 2 QPs: %v", err)
	}
	if _, err := NewSession(da, Params{Mode: ModeReadBW, OutReads: -1}, true); !errors.Is(err, ErrParams) {
		t.Errorf("-o -1: %v", err)
	}
	maxRd := da.Query().MaxQPRdAtom
	if _, err := NewSession(da, Params{Mode: ModeReadBW, OutReads: maxRd + 1}, true); !errors.Is(err, ErrParams) ||
		!strings.Contains(err.Error(), "max_qp_rd_atom") {
		t.Errorf("-o %d over the device's %d: %v", maxRd+1, maxRd, err)
	}
	for _, s := range []string{"", "write", "ib_write_bw2"} {
		if _, err := ParseMode(s); !errors.Is(err, ErrParams) {
			t.Errorf("ParseMode(%q): %v", s, err)
		}
	}
	if m, err := ParseMode("ib_read_lat"); err != nil || m != ModeReadLat {
		t.Errorf("ParseMode(ib_read_lat) = %v, %v", m, err)
	}
	if _, err := ParseAtomicOp("SWAP"); !errors.Is(err, ErrParams) {
		t.Errorf("ParseAtomicOp(SWAP): %v", err)
	}
}

func TestJSONAndCSV(t *testing.T) {
	c, _ := loopback(t, Params{Mode: ModeWriteBW, All: true, MaxSize: 64, Iters: 10})
	c.Ceiling = &Ceiling{PacketBytes: 4140, Payload: 4096, PayloadBytesPerSec: 1e9}
	c.CeilingRatio = 0.5
	c.ShapedCeiling = &Ceiling{PacketBytes: 100, Payload: 64, PayloadBytesPerSec: 5e8, MessageShape: []int{88}}
	c.ShapedCeilingRatio = 0.25
	var b bytes.Buffer
	if err := WriteJSON(&b, c); err != nil {
		t.Fatal(err)
	}
	var j map[string]any
	if err := json.Unmarshal(b.Bytes(), &j); err != nil {
		t.Fatalf("%v\n%s", err, b.Bytes())
	}
	if j["mode"] != "write_bw" || j["role"] != "client" || j["connection"] != "RC" || j["ceiling_ratio"] != 0.5 ||
		j["shaped_ceiling_ratio"] != 0.25 || j["shaped_ceiling_of_raw"] != 0.5 {
		t.Fatalf("json: %s", b.Bytes())
	}
	var back JSONReport
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Results) != 6 || back.Results[5].Bytes != 64 || back.Results[0].Iterations != 10 || !(back.Results[5].BWAvgMBps > 0) {
		t.Fatalf("json results %+v", back.Results)
	}
	b.Reset()
	if err := WriteCSV(&b, c); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 7 || strings.Join(rows[0], ",") != strings.Join(csvBW, ",") {
		t.Fatalf("csv rows %q", rows)
	}
	for _, row := range rows[1:] {
		for _, f := range row[1:] {
			if _, err := strconv.ParseFloat(f, 64); err != nil {
				t.Fatalf("csv field %q of %q: %v", f, row, err)
			}
		}
	}
	l, _ := loopback(t, Params{Mode: ModeSendLat, Iters: 10})
	b.Reset()
	if err := WriteCSV(&b, l); err != nil {
		t.Fatal(err)
	}
	rows, err = csv.NewReader(&b).ReadAll()
	if err != nil || len(rows) != 2 || rows[0][3] != "t_min_us" {
		t.Fatalf("latency csv %q, %v", rows, err)
	}
}

// TestCQModDefaults: perftest's force_dependecies signals every WR of
// messages over 8 KiB unless -Q is given or -a runs, and caps the TX depth
// at -n (its "CQ Moderation : 1" at 64 KiB in the interop logs).
func TestCQModDefaults(t *testing.T) {
	for _, tc := range []struct {
		p         Params
		tx, cqMod int
	}{
		{Params{Mode: ModeWriteBW}, 128, 1},
		{Params{Mode: ModeWriteBW, Size: 8192}, 128, 100},
		{Params{Mode: ModeWriteBW, Size: 8193, CQMod: 50}, 128, 50},
		{Params{Mode: ModeWriteBW, All: true}, 128, 100},
		{Params{Mode: ModeSendBW, Size: 16384, Iters: 50}, 50, 1},
		{Params{Mode: ModeSendBW, Size: 64, Iters: 50}, 50, 50},
		{Params{Mode: ModeWriteBW, Size: 64, Iters: 50, Duration: time.Second}, 128, 100},
	} {
		p := tc.p
		if err := p.Normalize(); err != nil {
			t.Fatal(err)
		}
		if p.TxDepth != tc.tx || p.CQMod != tc.cqMod {
			t.Errorf("%+v: TX depth %d, CQ moderation %d; want %d, %d", tc.p, p.TxDepth, p.CQMod, tc.tx, tc.cqMod)
		}
		if err := p.Normalize(); err != nil || p.TxDepth != tc.tx || p.CQMod != tc.cqMod {
			t.Errorf("%+v normalized twice: %d, %d, %v", tc.p, p.TxDepth, p.CQMod, err)
		}
	}
}

// TestTextLayout checks perftest's header and table lines.
func TestTextLayout(t *testing.T) {
	c, _ := loopback(t, Params{Mode: ModeReadBW, Iters: 10, Size: 64})
	var b bytes.Buffer
	PrintHeader(&b, c)
	PrintResult(&b, c, c.Results[0])
	PrintFooter(&b, c)
	out := b.String()
	for _, want := range []string{
		"                    RDMA_Read BW Test\n",
		" Dual-port       : OFF\t\tDevice         : goroce",
		" Number of qps   : 1\t\tTransport type : IB\n",
		" Connection type : RC\t\tUsing SRQ      : OFF\n",
		" PCIe relax order: OFF\n",
		" ibv_wr* API     : OFF\n",
		" TX depth        : 10\n", // perftest: no deeper than -n
		" CQ Moderation   : 10\n", // and no more than the TX depth
		" Mtu             : 4096[B]\n",
		" Link type       : Ethernet\n",
		" GID index       : 0\n",
		" Outstand reads  : 128\n",
		" rdma_cm QPs\t : OFF\n",
		" Data ex. method : Ethernet\n",
		" local address: LID 0000 QPN 0x",
		" OUT 0x80 RKey 0x",
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:0",
		" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n",
		" 64         10               ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestTextLayoutPerTool: where perftest 6.06's tools differ from each
// other (interop logs of the real tools next to goroce's).
func TestTextLayoutPerTool(t *testing.T) {
	text := func(r *Report) string {
		var b bytes.Buffer
		PrintHeader(&b, r)
		for _, res := range r.Results {
			if !res.Passive {
				PrintResult(&b, r, res)
			}
		}
		PrintFooter(&b, r)
		return b.String()
	}
	line := resultLine + "\n"
	c, s := loopback(t, Params{Mode: ModeAtomicBW, Iters: 10})
	for _, r := range []*Report{c, s} {
		if out := text(r); strings.Contains(out, " OUT 0x") || strings.Contains(out, " RKey 0x") {
			t.Errorf("atomic_bw address lines carry OUT/RKey:\n%s", out)
		}
	}
	if out := text(c); !strings.HasPrefix(out, line+line) {
		t.Errorf("atomic_bw client: want two RESULT_LINEs first:\n%s", out)
	}
	c, s = loopback(t, Params{Mode: ModeReadLat, Iters: 10})
	if out := text(s); strings.Contains(out, "#bytes") || !regexp.MustCompile(` GID: [0-9:]+\n`+line+`$`).MatchString(out) {
		t.Errorf("read_lat server: want no table, the addresses last:\n%s", out)
	}
	if out := text(c); !strings.Contains(out, " OUT 0x80 RKey 0x") || !strings.Contains(out, "#bytes #iterations") {
		t.Errorf("read_lat client:\n%s", out)
	}
	c, s = loopback(t, Params{Mode: ModeSendLat, Iters: 10})
	if out := text(c); strings.Contains(out, "RX depth") || !strings.Contains(out, " TX depth        : 1\n") {
		t.Errorf("send_lat client: want a TX depth and no RX depth:\n%s", out)
	}
	if out := text(s); strings.Contains(out, "TX depth") || !strings.Contains(out, " RX depth        : 10\n") {
		t.Errorf("send_lat server: want an RX depth and no TX depth:\n%s", out)
	}
	for m, want := range map[Mode]string{ModeReadBW: line + "\n****", ModeWriteBW: "\n****"} {
		var b bytes.Buffer
		PrintWaiting(&b, m)
		if !strings.HasPrefix(b.String(), want) {
			t.Errorf("%v server's first lines %q", m, b.String())
		}
	}
}

func TestCHex(t *testing.T) {
	for _, tc := range []struct {
		v    uint64
		w    int
		want string
	}{{0, 4, "0000"}, {0x13, 6, "0x0013"}, {0x37cfaa, 6, "0x37cfaa"}, {0x1fd4bc, 8, "0x1fd4bc"}, {0x7f0e0c8aa000, 16, "0x007f0e0c8aa000"}, {0x80, 4, "0x80"}} {
		if got := cHex(tc.v, tc.w); got != tc.want {
			t.Errorf("cHex(%#x, %d) = %q, want %q", tc.v, tc.w, got, tc.want)
		}
	}
}

func TestPlotFiles(t *testing.T) {
	dir := t.TempDir()
	bw, _ := loopback(t, Params{Mode: ModeWriteBW, All: true, MaxSize: 1 << 12, Iters: 20})
	lat, _ := loopback(t, Params{Mode: ModeSendLat, All: true, MaxSize: 1 << 10, Iters: 20})
	for name, r := range map[string]*Report{"bw": bw, "lat": lat} {
		ch, err := Plot(r)
		if err != nil {
			t.Fatal(err)
		}
		svg, pngf := filepath.Join(dir, name+".svg"), filepath.Join(dir, name+".png")
		for f, write := range map[string]func(io.Writer) error{svg: ch.WriteSVG, pngf: ch.WritePNG} {
			fh, err := os.Create(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := write(fh); err != nil {
				t.Fatal(err)
			}
			fh.Close()
		}
		checkSVG(t, svg, len(ch.Series))
		checkPNG(t, pngf)
	}
	if _, err := Plot(&Report{}); err == nil {
		t.Error("Plot of an empty report succeeded")
	}
}

// checkSVG parses the file as XML: an <svg> root with a polyline per series.
func checkSVG(t *testing.T, name string, series int) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil || len(data) == 0 {
		t.Fatalf("%s: %v (%d bytes)", name, err, len(data))
	}
	d := xml.NewDecoder(bytes.NewReader(data))
	root, polylines := "", 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: not valid XML: %v", name, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if se.Name.Local == "polyline" {
				polylines++
			}
		}
	}
	if root != "svg" || polylines != series+1 { // +1: the axes
		t.Fatalf("%s: root <%s>, %d polylines for %d series", name, root, polylines, series)
	}
}

func checkPNG(t *testing.T, name string) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, format, err := image.Decode(f)
	if err != nil || format != "png" {
		t.Fatalf("%s: %v (%s)", name, err, format)
	}
	if b := img.Bounds(); b.Dx() != plotW || b.Dy() != plotH {
		t.Fatalf("%s: %v", name, b)
	}
	// Not blank: some pixels carry a series colour.
	colored := 0
	for y := 0; y < plotH; y += 2 {
		for x := 0; x < plotW; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			if r != g || g != b {
				colored++
			}
		}
	}
	if colored < 100 {
		t.Fatalf("%s: only %d coloured pixels", name, colored)
	}
}

// replayConn feeds a captured byte stream to our side and records what it
// writes.
type replayConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *replayConn) Read(b []byte) (int, error)  { return c.in.Read(b) }
func (c *replayConn) Write(b []byte) (int, error) { return c.out.Write(b) }

// TestCaptureReplay plays the client half of real perftest captures (kernel
// rxe, perftest 4.5) against goroce bench's server: the passive servers of
// ib_write_bw, ib_read_bw and ib_atomic_bw only talk TCP while the client
// works, so the whole exchange can be replayed. Our answers must have the
// captured server's message lengths, and we must read the client's keys and
// its report.
func TestCaptureReplay(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "captures")
	for _, tc := range []struct {
		file string
		p    Params
		size int
	}{
		{"write_bw.pcap", Params{Mode: ModeWriteBW, Size: 64, Iters: 20}, 64},
		{"write_bw_8k.pcap", Params{Mode: ModeWriteBW, Size: 8192, Iters: 20}, 8192},
		{"read_bw.pcap", Params{Mode: ModeReadBW, Size: 64, Iters: 20}, 64},
		{"atomic_fa.pcap", Params{Mode: ModeAtomicBW, Iters: 20}, 8},
		{"atomic_cs.pcap", Params{Mode: ModeAtomicBW, Iters: 20, Atomic: CmpAndSwap}, 8},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, tc.file))
			if errors.Is(err, os.ErrNotExist) {
				t.Skipf("capture %s not present (needs the shared captures beside the repo)", tc.file)
			}
			if err != nil {
				t.Fatal(err)
			}
			st, err := pcaptest.ExtractTCP(data, exchange.DefaultPort)
			if err != nil {
				t.Fatal(err)
			}
			_, db := memPair(t)
			conn := &replayConn{in: bytes.NewReader(st.Client)}
			rep, err := RunPeer(testCtx(t), db, conn, false, tc.p, Hooks{})
			if err != nil {
				t.Fatal(err)
			}
			if conn.in.Len() != 0 {
				t.Fatalf("%d captured client bytes left unread", conn.in.Len())
			}
			if got, want := conn.out.Len(), len(st.Server); got != want {
				t.Fatalf("we wrote %d bytes, the real server %d", got, want)
			}
			if rep.RemoteVersion != "6.06" || rep.MTU.Bytes() != 1024 {
				t.Fatalf("peer version %q, MTU %d", rep.RemoteVersion, rep.MTU.Bytes())
			}
			if g := rep.Remote[0].GID; g[10] != 0xFF || netip.AddrFrom4([4]byte(g[12:])) != netip.MustParseAddr("10.77.0.3") {
				t.Fatalf("client GID %x", g)
			}
			r := rep.Results[0].BW
			if r.Size != tc.size || r.Iters != 20 || !(r.BytesPerSec > 0) {
				t.Fatalf("client report as we read it: %+v", r)
			}
			// Our keys messages are well-formed and carry our QP.
			keys := conn.out.Bytes()[exchange.VersionLen+2*exchange.SysDataLen+exchange.MTUMsgLen:]
			d, err := exchange.ParsePerftestGID(keys[:exchange.KeyMsgLenGID])
			if err != nil || d.QPN != rep.Local[0].QPN || d.OutReads != rep.Local[0].OutReads {
				t.Fatalf("our first keys message %q: %+v, %v", keys[:exchange.KeyMsgLenGID], d, err)
			}
		})
	}
}

// The result lines, byte for byte as perftest 6.06 prints them: the
// expected strings are lines of ib_send_lat and ib_write_bw runs on kernel
// rxe (interop logs), PrintResult given their figures.
func TestResultLineBytes(t *testing.T) {
	us := func(v float64) time.Duration { return time.Duration(v*1000 + 0.5) }
	for _, tc := range []struct {
		name string
		p    Params
		res  Result
		want string
	}{
		{"send_lat", Params{Mode: ModeSendLat}, Result{Lat: LatResult{Size: 2, Iters: 1000, Min: us(36.56), Max: us(1196.12),
			Typical: us(41.66), Avg: us(113.37), Stdev: us(130.63), P99: us(922.26), P999: us(1196.12)}},
			" 2       1000          36.56          1196.12      41.66    \t       113.37      \t130.63 \t\t922.26  \t\t1196.12\n"},
		// ib_send_lat -D 2: t_avg and round trips per second (1 / 2 t_avg).
		{"send_lat -D", Params{Mode: ModeSendLat, Duration: 2 * time.Second}, Result{Lat: LatResult{Size: 2, Iters: 27055, Avg: us(40)}},
			" 2             27055            40.00          12500.00\n"},
		// ib_read_lat -D 2: a sample is a whole round trip.
		{"read_lat -D", Params{Mode: ModeReadLat, Duration: 2 * time.Second}, Result{Lat: LatResult{Size: 2, Iters: 36735, Avg: us(50)}},
			" 2             36735            50.00          20000.00\n"},
		{"write_bw", Params{Mode: ModeWriteBW, QPs: 1}, Result{BW: BWResult{Size: 65536, Iters: 500, QPs: 1, Messages: 500,
			PeakBytesPerSec: 17.29 * (1 << 20), BytesPerSec: 17.24 * (1 << 20), MsgPerSec: 276}},
			" 65536      500              17.29              17.24  \t\t   0.000276\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			if err := p.Normalize(); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			PrintResult(&b, &Report{Params: p, Client: true}, tc.res)
			if b.String() != tc.want {
				t.Fatalf("result line\n%q\nwant\n%q", b.String(), tc.want)
			}
		})
	}
	var b strings.Builder
	p := Params{Mode: ModeWriteLat, Duration: time.Second}
	p.Normalize()
	printTableHead(&b, &p)
	if want := " #bytes        #iterations       t_avg[usec]    tps average\n"; b.String() != want {
		t.Fatalf("-D latency header %q, want %q", b.String(), want)
	}
}
