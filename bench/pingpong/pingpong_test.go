package pingpong

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/memlink"
)

var (
	addrA = netip.MustParseAddr("192.0.2.1")
	addrB = netip.MustParseAddr("192.0.2.2")
)

func devPair(t testing.TB, cfg memlink.Config) (*hca.Device, *hca.Device) {
	t.Helper()
	cfg.AddrsA, cfg.AddrsB = []netip.Addr{addrA}, []netip.Addr{addrB}
	a, b, err := memlink.Pair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	da, err := hca.Open(a, hca.Options{Name: "ga"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := hca.Open(b, hca.Options{Name: "gb"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	return da, db
}

var (
	localRE = regexp.MustCompile(`^  local address:  LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})([,:]) GID (\S+)$`)
	remotRE = regexp.MustCompile(`^  remote address: LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$`)
	bytesRE = regexp.MustCompile(`^(\d+) bytes in (\d+\.\d\d) seconds = (\d+\.\d\d) Mbit/sec$`)
	itersRE = regexp.MustCompile(`^(\d+) iters in (\d+\.\d\d) seconds = (\d+\.\d\d) usec/iter$`)
)

type side struct {
	out strings.Builder
	res *Result
	err error
}

// run runs a server on db and a client on da over a net.Pipe.
func run(t *testing.T, da, db *hca.Device, cfg Config, hook func(server *Session)) (client, server *side) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc, sc := net.Pipe()
	client, server = &side{}, &side{}
	one := func(dev *hca.Device, conn net.Conn, sd *side, isServer bool) {
		defer conn.Close()
		c := cfg
		c.Out = &sd.out
		c.GIDIndex = 0
		s, err := New(dev, c)
		if err != nil {
			sd.err = err
			cancel()
			return
		}
		defer s.Close()
		if isServer {
			if hook != nil {
				hook(s)
			}
			err = s.Serve(conn)
		} else {
			err = s.Dial(conn)
		}
		if err != nil {
			sd.err = err
			cancel()
			return
		}
		sd.res, sd.err = s.Run(ctx)
		if sd.err != nil {
			cancel() // separate processes would each exit; here the other side must stop waiting
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); one(db, sc, server, true) }()
	go func() { defer wg.Done(); one(da, cc, client, false) }()
	wg.Wait()
	return client, server
}

// checkOutput parses a side's lines as the C tools print them.
func checkOutput(t *testing.T, who string, sd *side, cfg Config, local, remote netip.Addr) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(sd.out.String(), "\n"), "\n")
	nqp := max(cfg.SRQ, 1)
	if len(lines) != 2*nqp+2 {
		t.Fatalf("%s: %d lines, want %d:\n%s", who, len(lines), 2*nqp+2, sd.out.String())
	}
	for i := range nqp {
		m := localRE.FindStringSubmatch(lines[i])
		if m == nil {
			t.Fatalf("%s: local line %q", who, lines[i])
		}
		wantSep := ","
		if cfg.Type == hca.UD {
			wantSep = ":"
		}
		if m[4] != wantSep || m[5] != "::ffff:"+local.String() || m[1] != "0000" {
			t.Errorf("%s: local line %q", who, lines[i])
		}
		if got := fmt.Sprintf("%06x", uint32(sd.res.Local[i].QPN)); got != m[2] {
			t.Errorf("%s: printed QPN %s, record %s", who, m[2], got)
		}
		r := remotRE.FindStringSubmatch(lines[nqp+i])
		if r == nil || r[4] != "::ffff:"+remote.String() {
			t.Fatalf("%s: remote line %q", who, lines[nqp+i])
		}
		if got := fmt.Sprintf("%06x", uint32(sd.res.Remote[i].PSN)); got != r[3] {
			t.Errorf("%s: printed remote PSN %s, record %s", who, r[3], got)
		}
	}
	b := bytesRE.FindStringSubmatch(lines[2*nqp])
	it := itersRE.FindStringSubmatch(lines[2*nqp+1])
	if b == nil || it == nil {
		t.Fatalf("%s: summary lines %q", who, lines[2*nqp:])
	}
	if want := fmt.Sprint(int64(cfg.Size) * int64(cfg.Iters) * 2); b[1] != want {
		t.Errorf("%s: %s bytes, want %s", who, b[1], want)
	}
	if it[1] != fmt.Sprint(cfg.Iters) || it[2] != b[2] {
		t.Errorf("%s: iters line %q", who, lines[2*nqp+1])
	}
}

func TestPingpong(t *testing.T) {
	type tc struct {
		name string
		cfg  Config
	}
	var cases []tc
	for _, typ := range []struct {
		name string
		typ  hca.QPType
		srq  int
	}{{"rc", hca.RC, 0}, {"uc", hca.UC, 0}, {"ud", hca.UD, 0}, {"srq3", hca.RC, 3}} {
		for _, size := range []int{1, 1024, 4096, 8192} {
			if typ.typ == hca.UD && size > 4096 {
				continue // ud_pingpong: -s at most the active MTU
			}
			for _, ev := range []bool{false, true} {
				c := Config{Type: typ.typ, SRQ: typ.srq, Size: size, Iters: 40, RxDepth: 16, Events: ev, MTU: bth.MTU1024}
				cases = append(cases, tc{fmt.Sprintf("%s/%d/events=%v", typ.name, size, ev), c})
			}
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			da, db := devPair(t, memlink.Config{})
			cl, sv := run(t, da, db, c.cfg, nil)
			if cl.err != nil || sv.err != nil {
				t.Fatalf("client: %v\nserver: %v", cl.err, sv.err)
			}
			checkOutput(t, "client", cl, c.cfg, addrA, addrB)
			checkOutput(t, "server", sv, c.cfg, addrB, addrA)
			for _, sd := range []*side{cl, sv} {
				if sd.res.Sends < c.cfg.Iters || sd.res.Recvs < c.cfg.Iters {
					t.Errorf("%d sends, %d receives, want at least %d each", sd.res.Sends, sd.res.Recvs, c.cfg.Iters)
				}
			}
		})
	}
}

// TestPingpongLossyRC runs RC through 2% loss each way: retransmissions
// must deliver every message once, intact.
func TestPingpongLossyRC(t *testing.T) {
	iters := 1000
	if testing.Short() {
		iters = 200
	}
	f := memlink.Faults{Loss: 0.02}
	da, db := devPair(t, memlink.Config{AtoB: f, BtoA: f, Seed: 7})
	cfg := Config{Type: hca.RC, Size: 4096, Iters: iters, RxDepth: 64}
	cl, sv := run(t, da, db, cfg, nil)
	if cl.err != nil || sv.err != nil {
		t.Fatalf("client: %v\nserver: %v", cl.err, sv.err)
	}
	if cl.res.Recvs != iters || sv.res.Recvs != iters {
		t.Fatalf("receives %d/%d, want %d", cl.res.Recvs, sv.res.Recvs, iters)
	}
}

// TestPingpongDetectsBadEcho makes the server echo a corrupted message: the
// client must fail with ErrData naming the byte.
func TestPingpongDetectsBadEcho(t *testing.T) {
	da, db := devPair(t, memlink.Config{})
	cfg := Config{Type: hca.RC, Size: 1024, Iters: 10, RxDepth: 8}
	cl, _ := run(t, da, db, cfg, func(s *Session) {
		s.echoHook = func(b []byte) { b[100] ^= 0x40 }
	})
	if !errors.Is(cl.err, ErrData) || !strings.Contains(cl.err.Error(), "at byte 100") {
		t.Fatalf("client error %v, want ErrData at byte 100", cl.err)
	}
}

func TestPingpongCheckFlag(t *testing.T) {
	da, db := devPair(t, memlink.Config{})
	cfg := Config{Type: hca.RC, Size: 3 * 4096, Iters: 5, RxDepth: 4, Check: true, MTU: bth.MTU4096}
	cl, sv := run(t, da, db, cfg, nil)
	if cl.err != nil || sv.err != nil {
		t.Fatalf("client: %v\nserver: %v", cl.err, sv.err)
	}
	if strings.Contains(sv.out.String(), "invalid data") {
		t.Fatalf("server output %q", sv.out.String())
	}
}

func TestKnownPattern(t *testing.T) {
	mk := func(n int, f func(i int) byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = f(i)
		}
		return b
	}
	ours := make([]byte, 10000)
	clientPattern(ours)
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"goroce", ours, true},
		{"rdma-core 0x7b", mk(10000, func(int) byte { return 0x7b }), true},
		{"rdma-core -c", mk(10000, func(i int) byte {
			if i%4096 == 0 {
				return 0
			}
			return 0x7b
		}), true},
		{"srq zero", make([]byte, 64), true},
		{"one byte 0x7b", []byte{0x7b}, true},
		{"garbage", mk(100, func(i int) byte { return byte(i * 3) }), false},
		{"0x7b with a zero off page start", mk(100, func(i int) byte {
			if i == 5 {
				return 0
			}
			return 0x7b
		}), false},
		{"ours with one flip", func() []byte { b := append([]byte(nil), ours...); b[4097] ^= 1; return b }(), false},
	} {
		if got := knownPattern(tc.b); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	da, _ := devPair(t, memlink.Config{MTU: 1500})
	for _, tc := range []struct {
		cfg Config
		msg string
	}{
		{Config{Type: hca.UD, Size: 2048}, "requested size larger than port MTU (1024)"},
		{Config{SRQ: 4, RxDepth: 3}, "rx_depth 3 is too small for 4 QPs"},
		{Config{SRQ: 2, Type: hca.UC}, "srq_pingpong uses RC QPs"},
		{Config{Port: 2}, "IB port 2"},
		{Config{GIDIndex: 5}, "can't read sgid of index 5"},
		{Config{RxDepth: 1}, "rx depth 1"},
		{Config{Size: -1}, "size -1"},
		{Config{Size: 1<<31 + 1}, "size 2147483649 is over the port's max_msg_sz 2147483648 (0x80000000)"},
		{Config{SL: 16}, "SL 16"},
	} {
		_, err := New(da, tc.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: error %v, want ErrConfig containing %q", tc.cfg, err, tc.msg)
		}
	}
}

// TestPeerWithoutGID: a peer run without -g sends an all-zero GID, which
// cannot be routed on RoCE; the server must refuse it with a clear error.
func TestPeerWithoutGID(t *testing.T) {
	_, db := devPair(t, memlink.Config{})
	s, err := New(db, Config{Size: 64, Iters: 1, RxDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cc, sc := net.Pipe()
	go func() {
		defer cc.Close()
		exchange.PingpongClient(cc, []exchange.PingpongDest{{QPN: 0x11, PSN: 1}})
	}()
	err = s.Serve(sc)
	sc.Close()
	if !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), "run the peer with -g") {
		t.Fatalf("error %v, want ErrPeer asking for -g", err)
	}
}

// TestPeerClosesDuringExchange: the client hangs up after its record.
func TestPeerClosesDuringExchange(t *testing.T) {
	_, db := devPair(t, memlink.Config{})
	s, err := New(db, Config{Size: 64, Iters: 1, RxDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cc, sc := net.Pipe()
	go func() {
		m := exchange.FormatPingpong(exchange.PingpongDest{QPN: 0x11, GID: hca.GIDFromAddr(addrA)})
		cc.Write(m[:20]) // half a record, then hang up
		cc.Close()
	}()
	err = s.Serve(sc)
	var se *exchange.StepError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "TCP exchange") {
		t.Fatalf("error %v, want a TCP exchange StepError", err)
	}
}
