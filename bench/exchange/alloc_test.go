package exchange_test

import (
	"testing"

	"github.com/goroce/goroce/bench/exchange"
)

// The codecs allocate nothing on success (only errors do), so a caller may
// use them in loops, e.g. a server handling many connections.
func TestCodecAllocs(t *testing.T) {
	pp := []byte(goodPP)
	key := []byte(goodKey)
	k59 := []byte(goodK59)
	d := exchange.PerftestDest{QPN: 0x2f, PSN: 0xae5a0f, RKey: 0x1fd9, VAddr: 0x55b8433c3000}
	for name, fn := range map[string]func(){
		"FormatPingpong":    func() { _ = exchange.FormatPingpong(exchange.PingpongDest{QPN: 1}) },
		"ParsePingpong":     func() { _, _ = exchange.ParsePingpong(pp) },
		"FormatPerftestGID": func() { _ = exchange.FormatPerftestGID(d) },
		"ParsePerftestGID":  func() { _, _ = exchange.ParsePerftestGID(key) },
		"FormatPerftest":    func() { _ = exchange.FormatPerftest(d) },
		"ParsePerftest":     func() { _, _ = exchange.ParsePerftest(k59) },
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %.1f allocs per run, want 0", name, n)
		}
	}
}

func BenchmarkParsePerftestGID(b *testing.B) {
	key := []byte(goodKey)
	b.ReportAllocs()
	b.SetBytes(int64(len(key)))
	for b.Loop() {
		if _, err := exchange.ParsePerftestGID(key); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFormatPerftestGID(b *testing.B) {
	d := exchange.PerftestDest{QPN: 0x2f, PSN: 0xae5a0f, RKey: 0x1fd9, VAddr: 0x55b8433c3000}
	b.ReportAllocs()
	b.SetBytes(exchange.KeyMsgLenGID)
	for b.Loop() {
		_ = exchange.FormatPerftestGID(d)
	}
}

func BenchmarkParsePingpong(b *testing.B) {
	pp := []byte(goodPP)
	b.ReportAllocs()
	b.SetBytes(int64(len(pp)))
	for b.Loop() {
		if _, err := exchange.ParsePingpong(pp); err != nil {
			b.Fatal(err)
		}
	}
}
