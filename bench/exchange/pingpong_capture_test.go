package exchange_test

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/goroce/goroce/bench/exchange"
	"github.com/goroce/goroce/bth"
)

func gid4(s string) [16]byte { return netip.MustParseAddr("::ffff:" + s).As16() }
func gid6(s string) [16]byte { return netip.MustParseAddr(s).As16() }

var pingpongCaptures = []struct {
	file    string
	records int
	// Spot values read off the capture by hand (client's and server's first QP).
	client, server exchange.PingpongDest
}{
	{"rc_pingpong.pcap", 1,
		exchange.PingpongDest{QPN: 0x27, PSN: 0x6698b8, GID: gid4("10.77.0.3")},
		exchange.PingpongDest{QPN: 0x29, PSN: 0xea1b56, GID: gid4("10.77.0.2")}},
	{"rc_pingpong_4k.pcap", 1,
		exchange.PingpongDest{QPN: 0x28, PSN: 0xf71325, GID: gid4("10.77.0.3")},
		exchange.PingpongDest{QPN: 0x2a, PSN: 0x92c227, GID: gid4("10.77.0.2")}},
	{"rc_pingpong_4k_mtu4096.pcap", 1, exchange.PingpongDest{}, exchange.PingpongDest{}},
	{"rc_pingpong_ipv6.pcap", 1,
		exchange.PingpongDest{QPN: 0x18, PSN: 0xf189f6, GID: gid6("fd77::3")},
		exchange.PingpongDest{QPN: 0x18, PSN: 0x131f06, GID: gid6("fd77::2")}},
	{"uc_pingpong.pcap", 1,
		exchange.PingpongDest{QPN: 0x29, PSN: 0x64be66, GID: gid4("10.77.0.3")},
		exchange.PingpongDest{QPN: 0x2b, PSN: 0x9421ee, GID: gid4("10.77.0.2")}},
	{"ud_pingpong.pcap", 1,
		exchange.PingpongDest{QPN: 0x2a, PSN: 0x67f988, GID: gid4("10.77.0.3")},
		exchange.PingpongDest{QPN: 0x2c, PSN: 0x68aff7, GID: gid4("10.77.0.2")}},
	{"ud_pingpong_ipv6.pcap", 1,
		exchange.PingpongDest{QPN: 0x19, PSN: 0x1a0345, GID: gid6("fd77::3")},
		exchange.PingpongDest{QPN: 0x19, PSN: 0x74e50e, GID: gid6("fd77::2")}},
	{"srq_pingpong.pcap", exchange.SRQRecords,
		exchange.PingpongDest{QPN: 0x2b, PSN: 0xa7e55e, GID: gid4("10.77.0.3")},
		exchange.PingpongDest{QPN: 0x2d, PSN: 0x0704a1, GID: gid4("10.77.0.2")}},
}

func parseRecords(t *testing.T, b []byte, n int) []exchange.PingpongDest {
	t.Helper()
	if len(b) != n*exchange.PingpongMsgLen {
		t.Fatalf("stream holds %d bytes, want %d records = %d bytes", len(b), n, n*exchange.PingpongMsgLen)
	}
	out := make([]exchange.PingpongDest, n)
	for i := range out {
		rec := b[i*exchange.PingpongMsgLen : (i+1)*exchange.PingpongMsgLen]
		d, err := exchange.ParsePingpong(rec)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if got := exchange.FormatPingpong(d); !bytes.Equal(got[:], rec) {
			t.Fatalf("record %d: FormatPingpong = %q, capture has %q", i, got[:], rec)
		}
		out[i] = d
	}
	return out
}

func TestPingpongCaptures(t *testing.T) {
	for _, tc := range pingpongCaptures {
		t.Run(tc.file, func(t *testing.T) {
			s := loadStreams(t, tc.file)
			n := tc.records * exchange.PingpongMsgLen
			if len(s.Client) != n+5 {
				t.Fatalf("client stream is %d bytes, want %d records + done = %d", len(s.Client), tc.records, n+5)
			}
			if !bytes.Equal(s.Client[n:], []byte("done\x00")) {
				t.Fatalf("client stream ends in %q, want done+NUL", s.Client[n:])
			}
			clientRecs := parseRecords(t, s.Client[:n], tc.records)
			serverRecs := parseRecords(t, s.Server, tc.records)
			if tc.client != (exchange.PingpongDest{}) {
				if clientRecs[0] != tc.client {
					t.Errorf("client record 0 = %+v, want %+v", clientRecs[0], tc.client)
				}
				if serverRecs[0] != tc.server {
					t.Errorf("server record 0 = %+v, want %+v", serverRecs[0], tc.server)
				}
			}
			if tc.records == exchange.SRQRecords {
				// srq_pingpong -q 2: two used QPs, the rest of its table zero.
				for i, recs := range [][]exchange.PingpongDest{clientRecs, serverRecs} {
					for j, d := range recs {
						used := d != (exchange.PingpongDest{})
						if used != (j < 2) {
							t.Errorf("side %d record %d = %+v, want used=%v", i, j, d, j < 2)
						}
					}
				}
				table, err := exchange.SRQTable(clientRecs[:2])
				if err != nil || !slices.Equal(table, clientRecs) {
					t.Errorf("SRQTable(first 2) does not rebuild the captured table (err %v)", err)
				}
			}

			t.Run("server", func(t *testing.T) {
				var remote []exchange.PingpongDest
				sent, writes := replay(t, s.Client, func(c net.Conn) error {
					var err error
					remote, err = exchange.PingpongServer(c, tc.records, func(r []exchange.PingpongDest) ([]exchange.PingpongDest, error) {
						if !slices.Equal(r, clientRecs) {
							t.Errorf("connect got %v, want the captured client records", r[:1])
						}
						return serverRecs, nil
					})
					return err
				})
				if !bytes.Equal(sent, s.Server) {
					t.Errorf("server sent %d bytes that differ from the captured %d", len(sent), len(s.Server))
				}
				if !slices.Equal(remote, clientRecs) {
					t.Errorf("server returned other remote records than the captured ones")
				}
				if !slices.Equal(writes, []int{n}) {
					t.Errorf("server write sizes %v, want [%d]", writes, n)
				}
			})
			t.Run("client", func(t *testing.T) {
				var remote []exchange.PingpongDest
				sent, writes := replay(t, s.Server, func(c net.Conn) error {
					var err error
					remote, err = exchange.PingpongClient(c, clientRecs)
					return err
				})
				if !bytes.Equal(sent, s.Client) {
					t.Errorf("client sent %d bytes that differ from the captured %d", len(sent), len(s.Client))
				}
				if !slices.Equal(remote, serverRecs) {
					t.Errorf("client returned other remote records than the captured ones")
				}
				if !slices.Equal(writes, []int{n, 5}) {
					t.Errorf("client write sizes %v, want [%d 5]", writes, n)
				}
			})
		})
	}
}

// TestPingpongRecordVectors runs without the captures: records copied from
// rc_pingpong.pcap and rc_pingpong_ipv6.pcap.
func TestPingpongRecordVectors(t *testing.T) {
	for _, tc := range []struct {
		wire string
		d    exchange.PingpongDest
	}{
		{"0000:000027:6698b8:00000000000000000000ffff0a4d0003\x00",
			exchange.PingpongDest{QPN: 0x27, PSN: 0x6698b8, GID: gid4("10.77.0.3")}},
		{"0000:000018:131f06:fd770000000000000000000000000002\x00",
			exchange.PingpongDest{QPN: 0x18, PSN: 0x131f06, GID: gid6("fd77::2")}},
		{"ffff:ffffff:ffffff:ffffffffffffffffffffffffffffffff\x00",
			exchange.PingpongDest{LID: 0xffff, QPN: 0xffffff, PSN: 0xffffff, GID: [16]byte{0: 0xff, 1: 0xff, 2: 0xff, 3: 0xff, 4: 0xff, 5: 0xff, 6: 0xff, 7: 0xff, 8: 0xff, 9: 0xff, 10: 0xff, 11: 0xff, 12: 0xff, 13: 0xff, 14: 0xff, 15: 0xff}}},
		{"0000:000000:000000:00000000000000000000000000000000\x00", exchange.PingpongDest{}},
	} {
		got, err := exchange.ParsePingpong([]byte(tc.wire))
		if err != nil || got != tc.d {
			t.Errorf("ParsePingpong(%q) = %+v, %v; want %+v", tc.wire, got, err, tc.d)
		}
		if f := exchange.FormatPingpong(tc.d); string(f[:]) != tc.wire {
			t.Errorf("FormatPingpong(%+v) = %q, want %q", tc.d, f[:], tc.wire)
		}
	}
	// Out-of-range QPN/PSN are masked to 24 bits, as on the wire.
	f := exchange.FormatPingpong(exchange.PingpongDest{QPN: 0x1abcdef, PSN: bth.PSN(0xff123456)})
	if string(f[5:18]) != "abcdef:123456" {
		t.Errorf("masking: got %q", f[:])
	}
}
