package exchange_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/goroce/goroce/bench/exchange"
)

// The parsers accept exactly what the tools' printf produces, so anything
// they accept must format back to the same bytes.

func FuzzParsePingpong(f *testing.F) {
	f.Add([]byte(goodPP))
	f.Add([]byte("0000:000018:131f06:fd770000000000000000000000000002\x00"))
	f.Add([]byte(set(goodPP, 10, 'A')))
	f.Add([]byte(goodPP[:30]))
	f.Add([]byte("done\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := exchange.ParsePingpong(b)
		if err != nil {
			var pe *exchange.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if got := exchange.FormatPingpong(d); !bytes.Equal(got[:], b) {
			t.Fatalf("round trip: %q -> %+v -> %q", b, d, got[:])
		}
	})
}

func FuzzParsePerftestGID(f *testing.F) {
	f.Add([]byte(goodKey))
	f.Add([]byte("0000:0001:00001a:63c31e:00000b13:00005620d5cc2000:fd:77:00:00:00:00:00:00:00:00:00:00:00:00:00:03:00000000:\x00"))
	f.Add([]byte(set(goodKey, 60, 'Z')))
	f.Add([]byte(goodK59))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := exchange.ParsePerftestGID(b)
		if err != nil {
			var pe *exchange.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if got := exchange.FormatPerftestGID(d); !bytes.Equal(got[:], b) {
			t.Fatalf("round trip: %q -> %+v -> %q", b, d, got[:])
		}
	})
}

func FuzzParsePerftest(f *testing.F) {
	f.Add([]byte(goodK59))
	f.Add([]byte(set(goodK59, 3, 'g')))
	f.Add([]byte(goodKey))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := exchange.ParsePerftest(b)
		if err != nil {
			var pe *exchange.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if got := exchange.FormatPerftest(d); !bytes.Equal(got[:], b) {
			t.Fatalf("round trip: %q -> %+v -> %q", b, d, got[:])
		}
	})
}

func FuzzParseVersion(f *testing.F) {
	f.Add([]byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("5.1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("6.06"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := exchange.ParseVersion(b)
		if err != nil {
			var pe *exchange.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if got := exchange.FormatVersion(v); !bytes.Equal(got[:], b) {
			t.Fatalf("round trip: %q -> %v -> %q", b, v, got[:])
		}
	})
}

func FuzzParseMTU(f *testing.F) {
	f.Add([]byte("3\x00"))
	f.Add([]byte("5\x00\x00\x00"))
	f.Add([]byte("7\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := exchange.ParseMTU(b)
		if err != nil {
			var pe *exchange.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		f, err := exchange.FormatMTU(m)
		if err != nil || !bytes.Equal(f[:], b[:2]) {
			t.Fatalf("round trip: %q -> %v -> %q, %v", b, m, f[:], err)
		}
	})
}

// FuzzPerftestSession feeds arbitrary peer streams to a whole ib_write_bw
// run, on both roles: it must end with nil or a *StepError, never panic or
// hang (the scripted peer ends in EOF).
func FuzzPerftestSession(f *testing.F) {
	ver := "6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	pre := ver + "\x00\x00\x10\x00\x00\x00\x00\x40" + "3\x00"
	f.Add([]byte(pre+goodKey+goodKey+goodKey+goodKey+"\x00\x00\x00\x00\x00\x00\x00\x40"+"\x00\x00\x00\x00\x00\x00\x00\x14"+"12345678abcdefgh01234567"+goodKey+"done\x00"), true)
	f.Add([]byte(pre+goodKey), false)
	f.Add([]byte("5.1\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"+goodKey), true)
	f.Fuzz(func(t *testing.T, peer []byte, client bool) {
		role := exchange.Server
		if client {
			role = exchange.Client
		}
		s, err := exchange.NewPerftestSession(&scripted{in: bytes.NewReader(peer)}, exchange.PerftestConfig{Role: role})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Run(exchange.WriteBW, exchange.Steps{
			LocalMTU: 3,
			Setup:    func(exchange.Params) ([]exchange.PerftestDest, error) { return dests(1, 2), nil },
			Connect:  func([]exchange.PerftestDest) error { return nil },
		})
		var se *exchange.StepError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("error %v (%T) is not a *StepError", err, err)
		}
	})
}

func FuzzPingpongServer(f *testing.F) {
	f.Add([]byte(goodPP+"done\x00"), uint8(1))
	f.Add([]byte(goodPP+goodPP), uint8(2))
	f.Add([]byte(goodPP[:40]), uint8(1))
	f.Fuzz(func(t *testing.T, peer []byte, n uint8) {
		records := int(n%4) + 1
		_, err := exchange.PingpongServer(&scripted{in: bytes.NewReader(peer)}, records, func(r []exchange.PingpongDest) ([]exchange.PingpongDest, error) {
			if len(r) != records {
				t.Fatalf("connect got %d records, want %d", len(r), records)
			}
			return r, nil
		})
		var se *exchange.StepError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("error %v (%T) is not a *StepError", err, err)
		}
	})
}
