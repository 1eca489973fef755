package bench

import (
	"context"
	"runtime"
	"testing"
)

// pollByte waits until the byte at off of r's MR holds want, as perftest
// spins on its poll_buf. Any value other than want and prev means the peer
// ran ahead of the lock-step (it wrote twice without waiting): perftest
// would spin forever there, the test fails instead.
func pollByte(t *testing.T, ctx context.Context, r *qpRes, off int, prev, want byte) {
	t.Helper()
	var b [1]byte
	for {
		if err := r.qp.ReadMR(r.mr, off, b[:]); err != nil {
			t.Fatal(err)
		}
		switch b[0] {
		case want:
			return
		case prev:
		default:
			t.Fatalf("waiting for WRITE %d the counter byte holds %d: the peer did not wait for our message", want, b[0])
		}
		if ctx.Err() != nil {
			t.Fatalf("no WRITE %d from the peer: %v", want, ctx.Err())
		}
		runtime.Gosched()
	}
}

// TestWriteLatServerWritesFirst pins who starts ib_write_lat: the SERVER
// (run_iter_lat_write polls before its first post only on the client; the
// golden write_lat.pcap has the server's WRITE, payload 00 01, first). Our
// server must write with no client action, and our client must answer
// each of a strictly lock-stepped perftest server's writes exactly once.
func TestWriteLatServerWritesFirst(t *testing.T) {
	const size, iters = 2, 300 // > 256: the counter byte wraps
	ctx := testCtx(t)

	t.Run("server", func(t *testing.T) {
		da, db := memPair(t)
		cli, srv := connected(t, da, db, Params{Mode: ModeWriteLat, Size: size, Iters: iters})
		if err := srv.Ready(size); err != nil {
			t.Fatal(err)
		}
		if err := cli.Ready(size); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { _, err := srv.Run(ctx, size); errc <- err }()
		// Be perftest's client: poll for i, then post i.
		cr := cli.qps[0]
		off := cli.bufSize + size - 1
		for i := 1; i <= iters; i++ {
			pollByte(t, ctx, cr, off, byte(i-1), byte(i))
			if i == 1 {
				var got [size]byte
				if err := cr.qp.ReadMR(cr.mr, cli.bufSize, got[:]); err != nil {
					t.Fatal(err)
				}
				if got != [size]byte{0, 1} {
					t.Fatalf("first WRITE payload % x, the capture's is 00 01", got)
				}
			}
			if err := cli.postLat(ctx, cr, i, size); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("client", func(t *testing.T) {
		da, db := memPair(t)
		cli, srv := connected(t, da, db, Params{Mode: ModeWriteLat, Size: size, Iters: iters})
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
		outc := make(chan out, 1)
		go func() { r, err := cli.Run(ctx, size); outc <- out{r, err} }()
		// Be perftest's server: post 1, then poll for i and post i+1.
		sr := srv.qps[0]
		off := srv.bufSize + size - 1
		for i := 1; i <= iters; i++ {
			if err := srv.postLat(ctx, sr, i, size); err != nil {
				t.Fatal(err)
			}
			pollByte(t, ctx, sr, off, byte(i-1), byte(i))
		}
		o := <-outc
		if o.err != nil {
			t.Fatal(o.err)
		}
		checkLat(t, o.r, size, iters)
	})
}
