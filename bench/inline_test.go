package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/transport"
)

// -I: SENDs and WRITEs that fit are posted inline (and arrive whole), larger
// ones and READs are not; the header says the size; the device's
// max_inline_data bounds it.
func TestInlineSize(t *testing.T) {
	for _, tc := range []struct {
		m      Mode
		size   int
		inline bool
	}{
		{ModeSendBW, 200, true},
		{ModeWriteBW, 236, true},
		{ModeWriteBW, 237, false},
		{ModeReadBW, 100, false},
		{ModeSendLat, 2, true},
	} {
		da, db := memPair(t)
		cli, srv := connected(t, da, db, Params{Mode: tc.m, Size: tc.size, Iters: 20, InlineSize: 236})
		if err := cli.Ready(tc.size); err != nil {
			t.Fatal(err)
		}
		r := cli.qps[0]
		if got := r.flags&transport.SendInline != 0; got != tc.inline || (r.wr.Inline != nil) != tc.inline {
			t.Fatalf("%v -s %d -I 236: inline %v (%d bytes), want %v", tc.m, tc.size, got, len(r.wr.Inline), tc.inline)
		}
		if tc.m == ModeSendLat {
			continue
		}
		fill(r.mr.Bytes()[:tc.size], 3)
		want := append([]byte(nil), r.mr.Bytes()[:tc.size]...)
		if tc.m == ModeReadBW {
			want = append(want[:0], srv.qps[0].mr.Bytes()[srv.bufSize:srv.bufSize+tc.size]...)
		}
		runBoth(t, testCtx(t), cli, srv, tc.size)
		got := make([]byte, tc.size)
		q, mr, off := srv.qps[0].qp, srv.qps[0].mr, srv.bufSize
		if tc.m == ModeReadBW {
			q, mr, off = r.qp, r.mr, 0
		}
		if err := q.ReadMR(mr, off, got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%v -s %d -I 236: the bytes did not arrive whole (%v)", tc.m, tc.size, err)
		}
	}
	var text strings.Builder
	PrintHeader(&text, &Report{Params: Params{Mode: ModeSendLat, InlineSize: 64}, Client: true})
	if !strings.Contains(text.String(), " Max inline data : 64[B]\n") {
		t.Fatalf("header:\n%s", text.String())
	}
	da, _ := memPair(t)
	maxInline := da.Query().MaxInlineData
	if _, err := NewSession(da, Params{Mode: ModeSendBW, InlineSize: maxInline + 1}, true); !errors.Is(err, ErrParams) ||
		!strings.Contains(err.Error(), "max_inline_data") {
		t.Fatalf("-I %d over the device's %d: %v", maxInline+1, maxInline, err)
	}
	if err := (&Params{Mode: ModeSendBW, InlineSize: -1}).Normalize(); !errors.Is(err, ErrParams) {
		t.Fatalf("-I -1: %v", err)
	}
}
