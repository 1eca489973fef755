package exchange_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
)

func dests(base uint32, n int) []exchange.PerftestDest {
	out := make([]exchange.PerftestDest, n)
	for i := range out {
		out[i] = exchange.PerftestDest{
			OutReads: 0x80, QPN: bth.QPN(base + uint32(i)), PSN: bth.PSN(base*7 + uint32(i)),
			RKey: bth.RKey(0x1000 + base + uint32(i)), VAddr: 0x5500_0000_0000 + uint64(i)<<12,
			GID: gid4(fmt.Sprintf("10.0.0.%d", base%250)), SRQN: uint32(i),
		}
	}
	return out
}

// TestPerftestLoopback runs our client against our server over real TCP on
// loopback for every tool, several QPs, both key formats and per-port
// reports, and checks what each side learns and in which order the steps
// ran.
func TestPerftestLoopback(t *testing.T) {
	for _, tool := range []exchange.Tool{exchange.SendBW, exchange.WriteBW, exchange.ReadBW, exchange.AtomicBW,
		exchange.SendLat, exchange.WriteLat, exchange.ReadLat} {
		for _, cfg := range []struct {
			qps     int
			noGID   bool
			perPort bool
		}{{1, false, false}, {3, false, true}, {2, true, false}} {
			name := fmt.Sprintf("%v/qps=%d/noGID=%v/perPort=%v", tool, cfg.qps, cfg.noGID, cfg.perPort)
			t.Run(name, func(t *testing.T) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				type side struct {
					res    exchange.Result
					err    error
					events []string
					hs     int
				}
				run := func(c net.Conn, role exchange.Role, local []exchange.PerftestDest, mtu bth.MTU, sys exchange.SysData, rep exchange.BWReport) (s side) {
					defer c.Close()
					c.SetDeadline(time.Now().Add(20 * time.Second)) // hang protection only
					sess, err := exchange.NewPerftestSession(c, exchange.PerftestConfig{Role: role, NoGID: cfg.noGID, ReportPerPort: cfg.perPort})
					if err != nil {
						s.err = err
						return
					}
					s.res, s.err = sess.Run(tool, exchange.Steps{
						LocalMTU: mtu, Sys: sys,
						Setup: func(p exchange.Params) ([]exchange.PerftestDest, error) {
							s.events = append(s.events, fmt.Sprintf("setup mtu=%d", p.MTU))
							return local, nil
						},
						Connect: func(r []exchange.PerftestDest) error {
							s.events = append(s.events, fmt.Sprintf("connect %d", len(r)))
							return nil
						},
						Ready: func() error { s.events = append(s.events, "ready"); return nil },
						Run:   func() (exchange.BWReport, error) { s.events = append(s.events, "run"); return rep, nil },
					})
					s.hs = sess.HandShakes()
					return
				}
				cl, sv := dests(0x20, cfg.qps), dests(0x40, cfg.qps)
				clRep := exchange.BWReport{Size: 65536, Iters: 5000, BWPeak: 12.5, BWAvg: 11.25, MsgRateAvg: 0.021,
					BWAvgP1: 1, MsgRateAvgP1: 2, BWAvgP2: 3, MsgRateAvgP2: 4}
				svRep := exchange.BWReport{Size: 1, Iters: 2, BWPeak: math.Inf(1)}
				var wg sync.WaitGroup
				var server side
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := ln.Accept()
					if err != nil {
						server.err = err
						return
					}
					server = run(c, exchange.Server, sv, bth.MTU4096, exchange.SysData{CycleBuffer: 4096, CacheLineSize: 128}, svRep)
				}()
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				client := run(c, exchange.Client, cl, bth.MTU1024, exchange.SysData{CycleBuffer: 65536, CacheLineSize: 64}, clRep)
				wg.Wait()
				if client.err != nil || server.err != nil {
					t.Fatalf("client: %v; server: %v", client.err, server.err)
				}
				for _, s := range []struct {
					name       string
					got        side
					wantRemote []exchange.PerftestDest
					wantReport exchange.BWReport
				}{{"client", client, sv, svRep}, {"server", server, cl, clRep}} {
					want := s.wantRemote
					if cfg.noGID {
						want = slices.Clone(want)
						for i := range want {
							want[i].GID = [16]byte{}
						}
					}
					if !slices.Equal(s.got.res.Remote, want) {
						t.Errorf("%s: remote %+v, want %+v", s.name, s.got.res.Remote, want)
					}
					if s.got.res.MTU != bth.MTU1024 || s.got.res.Sys != (exchange.SysData{CycleBuffer: 65536, CacheLineSize: 128}) {
						t.Errorf("%s: agreed %+v", s.name, s.got.res.Params)
					}
					wantRep := exchange.BWReport{}
					if tool.ExchangesReports() {
						wantRep = s.wantReport
						if !cfg.perPort {
							wantRep.BWAvgP1, wantRep.MsgRateAvgP1, wantRep.BWAvgP2, wantRep.MsgRateAvgP2 = 0, 0, 0, 0
						}
					}
					if s.got.res.RemoteReport != wantRep {
						t.Errorf("%s: remote report %+v, want %+v", s.name, s.got.res.RemoteReport, wantRep)
					}
					if s.got.hs != tool.HandShakes(cfg.qps) {
						t.Errorf("%s: %d hand-shakes, want %d", s.name, s.got.hs, tool.HandShakes(cfg.qps))
					}
					wantEv := []string{"setup mtu=3", fmt.Sprintf("connect %d", cfg.qps), "ready", "run"}
					if !slices.Equal(s.got.events, wantEv) {
						t.Errorf("%s: steps %v, want %v", s.name, s.got.events, wantEv)
					}
				}
			})
		}
	}
}

// TestPerftestOldPeers checks the version-dependent steps, including the
// C float rounding perftest applies in check_mtu and xchg_bw_reports.
func TestPerftestOldPeers(t *testing.T) {
	verMsg := func(v string) string { return v + strings.Repeat("\x00", 16-len(v)) }
	for _, tc := range []struct {
		remote   string
		sys      bool // check_sys_data happens (>= 5.32, double compare)
		mtuLen   int  // 0: no check_mtu; 2 or 4 bytes
		itersLen int  // 8 or 4
	}{
		{"6.06", true, 2, 8},
		{"5.70", true, 2, 8},
		{"5.33", true, 2, 4}, // float(5.33) < 5.33
		{"5.34", true, 2, 8},
		{"5.32", true, 2, 4},  // atof double: 5.32 >= 5.32
		{"5.31", false, 4, 4}, // float(5.31) < 5.31: old 4-byte MTU message
		{"5.2", false, 4, 4},  // 5.2 < 5.31 numerically
		{"5.11", false, 4, 4}, // float(5.11) > 5.1: MTU exchanged, 4 bytes
		{"5.1", false, 0, 4},  // float(5.1) < 5.1: perftest skips check_mtu
		{"5.0", false, 0, 4},
		{"4", false, 0, 4},
	} {
		t.Run(tc.remote, func(t *testing.T) {
			var peer bytes.Buffer
			peer.WriteString(verMsg(tc.remote))
			if tc.sys {
				peer.Write([]byte{0, 0, 0x20, 0, 0, 0, 0, 0x80})
			}
			if tc.mtuLen > 0 {
				peer.WriteString("2\x00\x00\x00"[:tc.mtuLen])
			}
			peer.WriteString(goodKey)
			peer.WriteString(goodKey)
			peer.WriteString(goodKey)
			peer.WriteString(goodKey)
			var w [8]byte
			binary.BigEndian.PutUint64(w[:], 64)
			peer.Write(w[:])
			if tc.itersLen == 8 {
				binary.BigEndian.PutUint64(w[:], 20)
				peer.Write(w[:])
			} else {
				peer.Write([]byte{0, 0, 0, 20})
			}
			binary.BigEndian.PutUint64(w[:], math.Float64bits(1.5))
			peer.Write(w[:])
			peer.Write(w[:])
			peer.Write(w[:])
			peer.WriteString(goodKey + "done\x00")
			conn := &scripted{in: &peer}
			sess, _ := exchange.NewPerftestSession(conn, exchange.PerftestConfig{Role: exchange.Client})
			res, err := sess.Run(exchange.WriteBW, exchange.Steps{
				LocalMTU: bth.MTU4096, Sys: exchange.SysData{CycleBuffer: 4096, CacheLineSize: 64},
				Setup:   func(exchange.Params) ([]exchange.PerftestDest, error) { return dests(1, 1), nil },
				Connect: func([]exchange.PerftestDest) error { return nil },
				Run:     func() (exchange.BWReport, error) { return exchange.BWReport{Size: 8, Iters: 9}, nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			if peer.Len() != 0 {
				t.Fatalf("%d peer bytes left unread", peer.Len())
			}
			wantSys := exchange.SysData{CycleBuffer: 4096, CacheLineSize: 64}
			if tc.sys {
				wantSys = exchange.SysData{CycleBuffer: 0x2000, CacheLineSize: 128}
			}
			wantMTU := bth.MTU4096
			if tc.mtuLen > 0 {
				wantMTU = bth.MTU512
			}
			if res.Sys != wantSys || res.MTU != wantMTU || res.RemoteReport.Iters != 20 || res.RemoteReport.BWAvg != 1.5 {
				t.Errorf("got %+v report %+v", res.Params, res.RemoteReport)
			}
			// What we sent must have the same shape.
			out := conn.out.String()
			wantLen := 16 + map[bool]int{true: 8}[tc.sys] + tc.mtuLen + 5*108 + 8 + tc.itersLen + 24 + 5
			if len(out) != wantLen {
				t.Errorf("we sent %d bytes, want %d", len(out), wantLen)
			}
			if !strings.HasPrefix(out, verMsg("6.06")) {
				t.Errorf("version message %q", out[:16])
			}
		})
	}
}

func TestNewPerftestSessionConfig(t *testing.T) {
	for _, cfg := range []exchange.PerftestConfig{
		{}, {Role: 3}, {Role: exchange.Client, Version: "v6"}, {Role: exchange.Server, Version: "1234567890123456"},
	} {
		if _, err := exchange.NewPerftestSession(&scripted{in: strings.NewReader("")}, cfg); !errors.Is(err, exchange.ErrConfig) {
			t.Errorf("%+v: err %v, want ErrConfig", cfg, err)
		}
	}
	s, err := exchange.NewPerftestSession(&scripted{in: strings.NewReader("")}, exchange.PerftestConfig{Role: exchange.Client})
	if err != nil {
		t.Fatal(err)
	}
	// Steps before exchange_versions are refused, not guessed.
	if _, err := s.CheckMTU(bth.MTU1024); !errors.Is(err, exchange.ErrConfig) {
		t.Errorf("CheckMTU before versions: %v", err)
	}
	if _, err := s.Run(exchange.Tool(99), exchange.Steps{}); !errors.Is(err, exchange.ErrConfig) {
		t.Errorf("bad tool: %v", err)
	}
	if _, err := s.Run(exchange.SendBW, exchange.Steps{}); !errors.Is(err, exchange.ErrConfig) {
		t.Errorf("missing steps: %v", err)
	}
	if _, err := exchange.FormatMTU(0); !errors.Is(err, exchange.ErrConfig) {
		t.Errorf("FormatMTU(0): %v", err)
	}
}

// TestStepErrorsPropagate checks that a failing caller step stops the run
// with a StepError naming it and wrapping the caller's error.
func TestStepErrorsPropagate(t *testing.T) {
	boom := errors.New("boom")
	ver := "6.06" + strings.Repeat("\x00", 12)
	pre := ver + "\x00\x00\x10\x00\x00\x00\x00\x40" + "3\x00"
	ok := func(exchange.Params) ([]exchange.PerftestDest, error) { return dests(1, 1), nil }
	okConn := func([]exchange.PerftestDest) error { return nil }
	for _, tc := range []struct {
		step  string
		peer  string
		steps exchange.Steps
	}{
		{"setup", pre, exchange.Steps{LocalMTU: 3, Setup: func(exchange.Params) ([]exchange.PerftestDest, error) { return nil, boom }, Connect: okConn}},
		{"ctx_connect", pre + goodKey + goodKey, exchange.Steps{LocalMTU: 3, Setup: ok, Connect: func([]exchange.PerftestDest) error { return boom }}},
		{"ready", pre + strings.Repeat(goodKey, 3), exchange.Steps{LocalMTU: 3, Setup: ok, Connect: okConn, Ready: func() error { return boom }}},
		{"run", pre + strings.Repeat(goodKey, 4), exchange.Steps{LocalMTU: 3, Setup: ok, Connect: okConn, Run: func() (exchange.BWReport, error) { return exchange.BWReport{}, boom }}},
	} {
		s, _ := exchange.NewPerftestSession(&scripted{in: strings.NewReader(tc.peer)}, exchange.PerftestConfig{Role: exchange.Client})
		_, err := s.Run(exchange.SendBW, tc.steps)
		var se *exchange.StepError
		if !errors.As(err, &se) || se.Step != tc.step || !errors.Is(err, boom) {
			t.Errorf("%s: got %v", tc.step, err)
		}
	}
	s, _ := exchange.NewPerftestSession(&scripted{in: strings.NewReader(pre)}, exchange.PerftestConfig{Role: exchange.Client})
	if _, err := s.Run(exchange.SendBW, exchange.Steps{LocalMTU: 3, Setup: func(exchange.Params) ([]exchange.PerftestDest, error) { return nil, nil }, Connect: okConn}); !errors.Is(err, exchange.ErrConfig) {
		t.Errorf("no QPs: %v", err)
	}
}

func TestPingpongSessionErrors(t *testing.T) {
	rec := goodPP
	echo := func(r []exchange.PingpongDest) ([]exchange.PingpongDest, error) { return r, nil }
	for _, tc := range []struct {
		name    string
		peer    string
		records int
		connect func([]exchange.PingpongDest) ([]exchange.PingpongDest, error)
		step    string
		want    error
	}{
		{"nothing", "", 1, echo, "read remote address [0]", io.EOF},
		{"half", rec[:20], 1, echo, "read remote address [0]", exchange.ErrShortRead},
		{"bad hex", set(rec, 7, 'x'), 1, echo, "read remote address [0]", exchange.ErrHex},
		{"second of two", rec + rec[:51], 2, echo, "read remote address [1]", exchange.ErrShortRead},
		{"no done", rec, 1, echo, `read "done"`, io.EOF},
		{"bad done", rec + "dome\x00", 1, echo, `read "done"`, exchange.ErrDone},
		{"connect fails", rec, 1, func([]exchange.PingpongDest) ([]exchange.PingpongDest, error) { return nil, errors.New("no QP") }, "connect QPs", nil},
		{"connect count", rec, 1, func([]exchange.PingpongDest) ([]exchange.PingpongDest, error) { return nil, nil }, "connect QPs", exchange.ErrConfig},
		{"records 0", rec, 0, echo, "pingpong server", exchange.ErrConfig},
		{"records 257", rec, 257, echo, "pingpong server", exchange.ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := exchange.PingpongServer(&scripted{in: strings.NewReader(tc.peer)}, tc.records, tc.connect)
			var se *exchange.StepError
			if !errors.As(err, &se) || se.Step != tc.step || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("got %v; want step %q wrapping %v", err, tc.step, tc.want)
			}
		})
	}
	// Client side.
	if _, err := exchange.PingpongClient(&scripted{in: strings.NewReader(rec[:10])}, []exchange.PingpongDest{{}}); !errors.Is(err, exchange.ErrShortRead) {
		t.Errorf("client short read: %v", err)
	}
	// A peer that closes without a byte is named as the one to ask.
	if _, err := exchange.PingpongClient(&scripted{in: strings.NewReader("")}, []exchange.PingpongDest{{}}); !errors.Is(err, io.EOF) ||
		!strings.Contains(err.Error(), "peer closed the connection instead of sending 52 bytes") {
		t.Errorf("client, peer closed: %v", err)
	}
	if _, err := exchange.PingpongClient(&scripted{in: strings.NewReader("")}, nil); !errors.Is(err, exchange.ErrConfig) {
		t.Errorf("client no records: %v", err)
	}
	if _, err := exchange.SRQTable(make([]exchange.PingpongDest, 257)); !errors.Is(err, exchange.ErrConfig) {
		t.Errorf("SRQTable(257): %v", err)
	}
}

// TestPingpongLoopback runs our client and server over loopback TCP, with
// the srq table size too.
func TestPingpongLoopback(t *testing.T) {
	for _, n := range []int{1, exchange.SRQRecords} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		mk := func(base uint32) []exchange.PingpongDest {
			out := make([]exchange.PingpongDest, n)
			for i := range out {
				out[i] = exchange.PingpongDest{LID: uint16(i), QPN: bth.QPN(base + uint32(i)), PSN: bth.PSN(base<<8 + uint32(i)), GID: gid6(fmt.Sprintf("fd00::%x", base+uint32(i)))}
			}
			return out
		}
		cl, sv := mk(0x100), mk(0x900)
		var srvRemote []exchange.PingpongDest
		var srvErr error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := ln.Accept()
			if err != nil {
				srvErr = err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			srvRemote, srvErr = exchange.PingpongServer(c, n, func([]exchange.PingpongDest) ([]exchange.PingpongDest, error) { return sv, nil })
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(20 * time.Second))
		got, err := exchange.PingpongClient(c, cl)
		c.Close()
		wg.Wait()
		ln.Close()
		if err != nil || srvErr != nil {
			t.Fatalf("n=%d: client %v, server %v", n, err, srvErr)
		}
		if !slices.Equal(got, sv) || !slices.Equal(srvRemote, cl) {
			t.Errorf("n=%d: records do not match", n)
		}
	}
}
