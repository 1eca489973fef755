package exchange_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"net"
	"slices"
	"testing"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
)

// What each perftest capture holds, counted by hand from the captures
// (perftest 4.5+0.17 "6.06", one QP, RoCE so 108-byte keys messages):
// hand-shakes before the report exchange, whether 5 x 8-byte reports follow
// (then one more hand-shake), and whether "done" ends the stream.
//
// The *_q3.pcap files in testdata are this project's own: the perftest
// TCP exchange of `ib_*_bw -q 3 -n 20 -x 1 -F` between two rxe devices of
// the interop VM (tcpdump on lo; testdata/README.md), for the order of the
// per-QP hand-shakes, which the one-QP captures cannot show.
var perftestCaptures = []struct {
	file         string
	qps          int  // QPs (-q); 0 means 1
	testdata     bool // in testdata/, not in the shared captures
	tool         exchange.Tool
	preReport    int // hand-shakes before reports (or in total when no reports)
	reports      bool
	done         bool
	client       exchange.PerftestDest // spot values read off the capture
	server       exchange.PerftestDest
	clientReport exchange.BWReport
}{
	{file: "send_bw.pcap", tool: exchange.SendBW, preReport: 5, done: true,
		client: exchange.PerftestDest{OutReads: 1, QPN: 0x2d, PSN: 0x1de136, VAddr: 0x0000556335e81000, GID: gid4("10.77.0.3")},
		server: exchange.PerftestDest{OutReads: 1, QPN: 0x2f, PSN: 0x500346, VAddr: 0x000055fd2365e000, GID: gid4("10.77.0.2")}},
	{file: "send_bw_8k.pcap", tool: exchange.SendBW, preReport: 5, done: true},
	{file: "send_bw_8k_mtu4096.pcap", tool: exchange.SendBW, preReport: 5, done: true},
	{file: "send_bw_8k_loss.pcap", tool: exchange.SendBW, preReport: 5, done: true},
	{file: "write_bw.pcap", tool: exchange.WriteBW, preReport: 4, reports: true, done: true,
		client:       exchange.PerftestDest{OutReads: 1, QPN: 0x2f, PSN: 0xae5a0f, RKey: 0x1fd9, VAddr: 0x000055b8433c3000, GID: gid4("10.77.0.3")},
		server:       exchange.PerftestDest{OutReads: 1, QPN: 0x31, PSN: 0x5e26c9, RKey: 0x200f, VAddr: 0x000056192b204000, GID: gid4("10.77.0.2")},
		clientReport: exchange.BWReport{Size: 64, Iters: 20, BWPeak: math.Float64frombits(0x3fcf3b1c09fe5d69), BWAvg: math.Float64frombits(0x3fca9aee0a766cd9), MsgRateAvg: math.Float64frombits(0x3f6be5c70f2e77ef)}},
	{file: "write_bw_8k.pcap", tool: exchange.WriteBW, preReport: 4, reports: true, done: true},
	{file: "write_bw_8k_mtu4096.pcap", tool: exchange.WriteBW, preReport: 4, reports: true, done: true},
	{file: "write_bw_8k_ipv6.pcap", tool: exchange.WriteBW, preReport: 4, reports: true, done: true,
		client: exchange.PerftestDest{OutReads: 1, QPN: 0x1a, PSN: 0x63c31e, RKey: 0xb13, VAddr: 0x00005620d5cc2000, GID: gid6("fd77::3")},
		server: exchange.PerftestDest{OutReads: 1, QPN: 0x1a, PSN: 0x63c31e, RKey: 0xb82, VAddr: 0x0000557225ef8000, GID: gid6("fd77::2")}},
	{file: "read_bw.pcap", tool: exchange.ReadBW, preReport: 4, reports: true, done: true,
		client: exchange.PerftestDest{OutReads: 0x80, QPN: 0x31, PSN: 0xfae476, RKey: 0x210c, VAddr: 0x000055c59e80f000, GID: gid4("10.77.0.3")},
		server: exchange.PerftestDest{OutReads: 0x80, QPN: 0x33, PSN: 0x354a87, RKey: 0x226a, VAddr: 0x00005580bb746000, GID: gid4("10.77.0.2")}},
	{file: "read_bw_8k.pcap", tool: exchange.ReadBW, preReport: 4, reports: true, done: true},
	{file: "read_bw_8k_mtu4096.pcap", tool: exchange.ReadBW, preReport: 4, reports: true, done: true},
	{file: "atomic_fa.pcap", tool: exchange.AtomicBW, preReport: 4, reports: true, done: true},
	{file: "atomic_cs.pcap", tool: exchange.AtomicBW, preReport: 4, reports: true, done: true},
	{file: "send_lat.pcap", tool: exchange.SendLat, preReport: 5, done: true,
		client: exchange.PerftestDest{OutReads: 1, QPN: 0x35, PSN: 0x0cbd9d, VAddr: 0x00005614fb179000, GID: gid4("10.77.0.3")},
		server: exchange.PerftestDest{OutReads: 1, QPN: 0x37, PSN: 0xf2613f, VAddr: 0x000055df6dcbf000, GID: gid4("10.77.0.2")}},
	{file: "write_lat.pcap", tool: exchange.WriteLat, preReport: 4,
		client: exchange.PerftestDest{OutReads: 1, QPN: 0x36, PSN: 0x1ffce0, RKey: 0x26f7, VAddr: 0x000056299c341000, GID: gid4("10.77.0.3")},
		server: exchange.PerftestDest{OutReads: 1, QPN: 0x38, PSN: 0x31f952, RKey: 0x27eb, VAddr: 0x000055eb6785b000, GID: gid4("10.77.0.2")}},
	{file: "send_bw_q3.pcap", qps: 3, testdata: true, tool: exchange.SendBW, preReport: 9, done: true},
	{file: "write_bw_q3.pcap", qps: 3, testdata: true, tool: exchange.WriteBW, preReport: 8, reports: true, done: true},
	{file: "read_bw_q3.pcap", qps: 3, testdata: true, tool: exchange.ReadBW, preReport: 8, reports: true, done: true},
	{file: "atomic_bw_q3.pcap", qps: 3, testdata: true, tool: exchange.AtomicBW, preReport: 8, reports: true, done: true},
}

// keyOrder returns, for each hand-shake of tool with q QPs, the index of
// the QP whose keys it carries: a round over the QPs, QP 0's "after RTR"
// hand-shake (before the second round for the send tools, after it for
// the others), a second round, then QP 0's for the rest.
func keyOrder(tool exchange.Tool, q, total int) []int {
	var o []int
	round := func() {
		for i := range q {
			o = append(o, i)
		}
	}
	round()
	if tool == exchange.SendBW || tool == exchange.SendLat {
		o = append(o, 0)
		round()
	} else {
		round()
		o = append(o, 0)
	}
	for len(o) < total {
		o = append(o, 0)
	}
	return o
}

// perftestSide is one direction of a captured perftest exchange, cut into
// its messages.
type perftestSide struct {
	version  exchange.Version
	sys      exchange.SysData
	mtu      bth.MTU
	keys     []exchange.PerftestDest
	report   exchange.BWReport
	msgSizes []int // every message, in order
}

// cutPerftest splits one direction by the layout the capture is known to
// have, parsing (and re-formatting, to compare) every message.
func cutPerftest(t *testing.T, b []byte, hs int, reports, done bool) perftestSide {
	t.Helper()
	var side perftestSide
	take := func(n int) []byte {
		t.Helper()
		if len(b) < n {
			t.Fatalf("stream ends %d bytes short of a %d-byte message", n-len(b), n)
		}
		m := b[:n]
		b = b[n:]
		side.msgSizes = append(side.msgSizes, n)
		return m
	}
	m := take(exchange.VersionLen)
	v, err := exchange.ParseVersion(m)
	if err != nil {
		t.Fatal(err)
	}
	if f := exchange.FormatVersion(v); !bytes.Equal(f[:], m) {
		t.Fatalf("FormatVersion = %q, capture %q", f[:], m)
	}
	side.version = v
	side.sys.CycleBuffer = int32(binary.BigEndian.Uint32(take(4)))
	side.sys.CacheLineSize = int32(binary.BigEndian.Uint32(take(4)))
	m = take(exchange.MTUMsgLen)
	if side.mtu, err = exchange.ParseMTU(m); err != nil {
		t.Fatal(err)
	}
	if f, _ := exchange.FormatMTU(side.mtu); !bytes.Equal(f[:], m) {
		t.Fatalf("FormatMTU = %q, capture %q", f[:], m)
	}
	keys := func(n int) {
		for range n {
			m := take(exchange.KeyMsgLenGID)
			d, err := exchange.ParsePerftestGID(m)
			if err != nil {
				t.Fatal(err)
			}
			if f := exchange.FormatPerftestGID(d); !bytes.Equal(f[:], m) {
				t.Fatalf("FormatPerftestGID = %q, capture %q", f[:], m)
			}
			side.keys = append(side.keys, d)
		}
	}
	keys(hs)
	if reports {
		var w [5]uint64
		for i := range w {
			w[i] = binary.BigEndian.Uint64(take(8))
		}
		side.report = exchange.BWReport{Size: w[0], Iters: w[1], BWPeak: math.Float64frombits(w[2]),
			BWAvg: math.Float64frombits(w[3]), MsgRateAvg: math.Float64frombits(w[4])}
		keys(1)
	}
	if done {
		if m := take(5); string(m) != "done\x00" {
			t.Fatalf("last message %q, want done+NUL", m)
		}
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left after the expected messages: %q", len(b), b)
	}
	return side
}

func TestPerftestCaptures(t *testing.T) {
	for _, tc := range perftestCaptures {
		t.Run(tc.file, func(t *testing.T) {
			total := tc.preReport
			if tc.reports {
				total++
			}
			q := max(tc.qps, 1)
			if got := tc.tool.HandShakes(q); got != total {
				t.Errorf("%v.HandShakes(%d) = %d, capture has %d", tc.tool, q, got, total)
			}
			if tc.tool.ExchangesReports() != tc.reports || tc.tool.SendsDone() != tc.done {
				t.Errorf("%v: ExchangesReports/SendsDone = %v/%v, capture %v/%v", tc.tool,
					tc.tool.ExchangesReports(), tc.tool.SendsDone(), tc.reports, tc.done)
			}
			dir := capturesDir
			if tc.testdata {
				dir = "testdata"
			}
			s := loadStreamsFrom(t, dir, tc.file)
			cl := cutPerftest(t, s.Client, tc.preReport, tc.reports, tc.done)
			sv := cutPerftest(t, s.Server, tc.preReport, tc.reports, tc.done)
			for _, side := range []perftestSide{cl, sv} {
				if side.version.String() != "6.06" || side.mtu != bth.MTU1024 && side.mtu != bth.MTU4096 ||
					side.sys != (exchange.SysData{CycleBuffer: 4096, CacheLineSize: 64}) {
					t.Errorf("unexpected preamble %v %v %+v", side.version, side.mtu, side.sys)
				}
				order := keyOrder(tc.tool, q, total)
				for i, k := range side.keys {
					if k != side.keys[order[i]] {
						t.Errorf("hand-shake %d carries %+v, not QP %d's %+v", i, k, order[i], side.keys[order[i]])
					}
				}
				if q > 1 && side.keys[0] == side.keys[1] {
					t.Errorf("the first round repeats QP 0: %+v", side.keys[:q])
				}
			}
			if tc.client != (exchange.PerftestDest{}) {
				if cl.keys[0] != tc.client || sv.keys[0] != tc.server {
					t.Errorf("keys = %+v / %+v, want %+v / %+v", cl.keys[0], sv.keys[0], tc.client, tc.server)
				}
			}
			if tc.clientReport != (exchange.BWReport{}) && cl.report != tc.clientReport {
				t.Errorf("client report %+v, want %+v", cl.report, tc.clientReport)
			}

			// Play each of our sides against the other side's captured stream.
			for _, role := range []exchange.Role{exchange.Server, exchange.Client} {
				me, peer, peerStream, myStream := sv, cl, s.Client, s.Server
				if role == exchange.Client {
					me, peer, peerStream, myStream = cl, sv, s.Server, s.Client
				}
				t.Run(role.String(), func(t *testing.T) {
					var res exchange.Result
					var hs int
					sent, writes := replay(t, peerStream, func(c net.Conn) error {
						sess, err := exchange.NewPerftestSession(c, exchange.PerftestConfig{Role: role})
						if err != nil {
							return err
						}
						res, err = sess.Run(tc.tool, exchange.Steps{
							LocalMTU: me.mtu,
							Sys:      me.sys,
							Setup: func(p exchange.Params) ([]exchange.PerftestDest, error) {
								return me.keys[:q], nil
							},
							Connect: func(remote []exchange.PerftestDest) error {
								if !slices.Equal(remote, peer.keys[:q]) {
									t.Errorf("Connect got %+v, want %+v", remote, peer.keys[:q])
								}
								return nil
							},
							Run: func() (exchange.BWReport, error) { return me.report, nil },
						})
						hs = sess.HandShakes()
						return err
					})
					if !bytes.Equal(sent, myStream) {
						t.Errorf("we sent %d bytes that differ from the captured %d:\n got %q\nwant %q", len(sent), len(myStream), sent, myStream)
					}
					if !slices.Equal(writes, me.msgSizes) {
						t.Errorf("write sizes %v, want one write per message %v", writes, me.msgSizes)
					}
					if hs != total {
						t.Errorf("did %d hand-shakes, want %d", hs, total)
					}
					if res.RemoteVersion.String() != "6.06" || res.MTU != me.mtu || res.Sys != me.sys {
						t.Errorf("params %+v", res.Params)
					}
					if !slices.Equal(res.Remote, peer.keys[:q]) {
						t.Errorf("remote %+v, want %+v", res.Remote, peer.keys[:q])
					}
					if res.RemoteReport != peer.report {
						t.Errorf("remote report %+v, want %+v", res.RemoteReport, peer.report)
					}
				})
			}
		})
	}
}
