package afpacket

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/goroce/goroce/bench"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/netcfg"
	"github.com/goroce/goroce/transport"
)

// openDevices opens an hca.Device on each end of a veth pair in two fresh
// namespaces, resolving next hops through each namespace's kernel tables.
func openDevices(t *testing.T, opts netcfg.TwoHostsOptions, roceV1 bool) (da, db *hca.Device, a, b *Endpoint) {
	t.Helper()
	a, b, h := openPair(t, opts)
	var err error
	da, err = hca.Open(a, hca.Options{Name: "afp-a", RoCEv1: roceV1,
		Resolver: netcfg.NewResolver(netcfg.ResolverConfig{NetNS: h.A.NS, Interface: h.A.Ifname})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	db, err = hca.Open(b, hca.Options{Name: "afp-b", RoCEv1: roceV1,
		Resolver: netcfg.NewResolver(netcfg.ResolverConfig{NetNS: h.B.NS, Interface: h.B.Ifname})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return da, db, a, b
}

// TestRCOverVeth runs every RC operation (SEND, WRITE, WRITE with
// immediate, READ, atomics) with data checks between two devices on the
// two ends of a veth pair, over RoCEv2 and RoCEv1 framing.
func TestRCOverVeth(t *testing.T) {
	for _, tc := range []struct {
		name string
		v1   bool
		mtu  int
	}{
		{"RoCEv2", false, 1500},
		{"RoCEv2-MTU9000", false, 9000},
		{"RoCEv1", true, 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			da, db, a, b := openDevices(t, netcfg.TwoHostsOptions{MTU: tc.mtu}, tc.v1)
			p, err := bench.NewPair(da, db, bench.PairConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			checks := bench.RunChecks(ctx, p)
			if len(checks) == 0 {
				t.Fatal("RunChecks ran nothing")
			}
			for _, c := range checks {
				if c.Err != nil {
					t.Errorf("%s: %v", c.Name, c.Err)
				} else {
					t.Logf("%s: ok", c.Name)
				}
			}
			if da.Counters.RxICRCErrors.Load()+db.Counters.RxICRCErrors.Load() != 0 {
				t.Errorf("ICRC errors: %d, %d", da.Counters.RxICRCErrors.Load(), db.Counters.RxICRCErrors.Load())
			}
			sa, sb := a.Stats(), b.Stats()
			if sa.TxFrames == 0 || sb.RxFrames == 0 || sb.TxFrames == 0 || sa.RxFrames == 0 {
				t.Errorf("no traffic through the packet sockets: %+v %+v", sa, sb)
			}
		})
	}
}

// TestRCLossy sends 10,000 RC SEND messages (1..3 packets each at path MTU
// 1024) over a veth pair that drops 2% of RoCE frames in each direction
// (nftables egress rules), and checks every message arrives whole, once and
// in order.
func TestRCLossy(t *testing.T) {
	t.Run("RoCEv2", func(t *testing.T) { testRCLossy(t, false, 14) })
	t.Run("RoCEv1", func(t *testing.T) { testRCLossy(t, true, 14) })
}

// TestRCLossyShortTimeout is TestRCLossy with a ~1 ms local ACK timeout,
// so retransmissions race with ACKs still in flight. It found a go-back-N
// bug in the requester (fixed; transport's TestGoBackHeadCompletedBySeqNAK
// and TestLossyShortTimeout now cover it deterministically). It stays
// opt-in because the retransmission storm can overflow a packet socket's
// receive queue on a loaded machine, and the frame accounting below counts
// that as loss outside the nftables rules (3 runs in 14, with every message
// still delivered correctly).
func TestRCLossyShortTimeout(t *testing.T) {
	if os.Getenv("GOROCE_SHORT_TIMEOUT") == "" {
		t.Skip("opt-in (GOROCE_SHORT_TIMEOUT=1): the retransmission storm of a 1 ms ACK timeout can overflow the receive queue, which the frame accounting flags")
	}
	testRCLossy(t, false, 8)
}

func testRCLossy(t *testing.T, roceV1 bool, timeout uint8) {
	const (
		messages = 10000
		depth    = 32
		slot     = 3000
		lossPct  = 2
	)
	da, db, a, b := openDevices(t, netcfg.TwoHostsOptions{Loss: lossPct}, roceV1)
	p, err := bench.NewPair(da, db, bench.PairConfig{
		BufSize: 2 * depth * slot, Depth: depth, MTU: bth.MTU1024,
		Timeout: timeout, // 14: 67 ms, as perftest
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sa, sb := p.A, p.B
	size := func(i int) int { return 1 + (i*389)%slot }
	fill := func(buf []byte, i int) {
		for j := range buf {
			buf[j] = byte(i) ^ byte(i>>8) ^ byte(j*7+j>>8)
		}
	}
	recvOff := depth * slot
	for s := range depth {
		if err := sb.QP.PostRecv(&hca.RecvWR{ID: uint64(s), SGL: []hca.SGE{sb.MR.SGE(recvOff+s*slot, slot)}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	want := make([]byte, slot)
	wcs := make([]hca.WC, depth)
	sent, sendDone, recvd := 0, 0, 0
	start := time.Now()
	for recvd < messages {
		if ctx.Err() != nil {
			t.Fatalf("timed out: %d sent, %d send completions, %d received", sent, sendDone, recvd)
		}
		for sent < messages && sent-sendDone < depth {
			s := sent % depth
			fill(sa.Buf[s*slot:s*slot+size(sent)], sent)
			err := sa.QP.PostSend(&hca.SendWR{ID: uint64(sent), Opcode: transport.WRSend,
				Flags: transport.SendSignaled, SGL: []hca.SGE{sa.MR.SGE(s*slot, size(sent))}})
			if err != nil {
				t.Fatalf("PostSend %d: %v", sent, err)
			}
			sent++
		}
		progress := false
		n, err := sa.CQ.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != transport.StatusSuccess || wc.WRID != uint64(sendDone) {
				t.Fatalf("send completion %d: %+v", sendDone, wc)
			}
			sendDone++
			progress = true
		}
		n, err = sb.CQ.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:n] {
			s := recvd % depth
			if wc.Status != transport.StatusSuccess || wc.WRID != uint64(s) || int(wc.ByteLen) != size(recvd) {
				t.Fatalf("receive completion %d: %+v (want %d bytes in slot %d)", recvd, wc, size(recvd), s)
			}
			got := sb.Buf[recvOff+s*slot : recvOff+s*slot+size(recvd)]
			fill(want[:size(recvd)], recvd)
			if !bytes.Equal(got, want[:size(recvd)]) {
				t.Fatalf("message %d: data differs", recvd)
			}
			clear(got)
			if err := sb.QP.PostRecv(&hca.RecvWR{ID: uint64(s), SGL: []hca.SGE{sb.MR.SGE(recvOff+s*slot, slot)}}); err != nil {
				t.Fatal(err)
			}
			recvd++
			progress = true
		}
		if !progress {
			time.Sleep(50 * time.Microsecond)
		}
	}
	elapsed := time.Since(start)
	for sendDone < messages {
		wc, err := bench.WaitWC(ctx, sa.CQ)
		if err != nil || wc.Status != transport.StatusSuccess {
			t.Fatalf("send completion %d: %+v, %v", sendDone, wc, err)
		}
		sendDone++
	}
	// Stop all traffic (late ACKs) before comparing counters.
	p.Close()
	da.Close()
	db.Close()
	ast, bst := a.Stats(), b.Stats()
	t.Logf("%d messages in %v; A tx %d rx %d, B tx %d rx %d frames; %s", messages, elapsed.Round(time.Millisecond),
		ast.TxFrames, ast.RxFrames, bst.TxFrames, bst.RxFrames, lossSummary(ast, bst))
	// The loss rules must really have dropped frames in both directions
	// (an egress drop surfaces as ENOBUFS: TxDropped), at about lossPct.
	for _, d := range []struct {
		name     string
		tx, drop uint64
		rx       uint64
	}{{"A→B", ast.TxFrames, ast.TxDropped, bst.RxFrames}, {"B→A", bst.TxFrames, bst.TxDropped, ast.RxFrames}} {
		if d.tx != d.rx {
			t.Errorf("%s: %d frames sent, %d received: loss outside the rules", d.name, d.tx, d.rx)
		}
		rate := 100 * float64(d.drop) / float64(d.tx+d.drop)
		if d.drop == 0 || rate > 4*lossPct {
			t.Errorf("%s: %d of %d frames dropped (%.2f%%), want about %d%%", d.name, d.drop, d.tx+d.drop, rate, lossPct)
		}
	}
}

func lossSummary(a, b Stats) string {
	return fmt.Sprintf("dropped A→B %d (%.2f%%), B→A %d (%.2f%%)",
		a.TxDropped, 100*float64(a.TxDropped)/float64(a.TxFrames+a.TxDropped),
		b.TxDropped, 100*float64(b.TxDropped)/float64(b.TxFrames+b.TxDropped))
}
