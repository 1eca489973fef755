package bench

import (
	"errors"
	"strings"
	"testing"
)

// -l: WRs go out in chained lists, every message is counted once, the CQ
// moderation follows the list unless -Q says otherwise, and the header
// says so as perftest's does.
func TestPostList(t *testing.T) {
	for _, tc := range []struct {
		p     Params
		cqMod int
	}{
		{Params{Mode: ModeWriteBW, Size: 4096, Iters: 400, PostList: 4}, 4},
		{Params{Mode: ModeSendBW, Size: 1000, Iters: 400, PostList: 8, CQMod: 2}, 2},
		{Params{Mode: ModeReadBW, Size: 65536, Iters: 64, PostList: 16, QPs: 2}, 16}, // over 8 KiB: the list still sets it
	} {
		t.Run(tc.p.Mode.String(), func(t *testing.T) {
			c, s := loopback(t, tc.p)
			qps := max(tc.p.QPs, 1)
			checkBW(t, c.Results[0], tc.p.Size, tc.p.Iters, qps)
			if tc.p.Mode == ModeSendBW {
				checkBW(t, s.Results[0], tc.p.Size, tc.p.Iters, qps)
			}
			if got := c.Params.CQMod; got != tc.cqMod {
				t.Fatalf("CQ moderation %d, want %d", got, tc.cqMod)
			}
			var text strings.Builder
			PrintHeader(&text, c)
			if h := text.String(); !strings.Contains(h, " Post List BW Test\n") || !strings.Contains(h, " Post List       : ") {
				t.Fatalf("header:\n%s", h)
			}
		})
	}
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Mode: ModeWriteBW, Iters: 1000, PostList: 3}, "multiple of post list size"},
		{Params{Mode: ModeWriteBW, Iters: 1000, PostList: 4, CQMod: 3}, "multiple of CQ moderation"},
		{Params{Mode: ModeWriteBW, PostList: 256}, "TX depth"},
		{Params{Mode: ModeSendLat, PostList: 2}, "bandwidth modes"},
		{Params{Mode: ModeWriteBW, PostList: -1}, "at least one"},
	} {
		if err := tc.p.Normalize(); !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrParams saying %q", tc.p, err, tc.want)
		}
	}
}

// Notices are force_dependecies' stdout lines about the flags as given.
func TestNotices(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want int
	}{
		{Params{Mode: ModeWriteBW}, 0},
		{Params{Mode: ModeWriteBW, Size: 65536, CQMod: 4}, 1},              // -Q over 1 at 64 KiB
		{Params{Mode: ModeWriteBW, Size: 8192, CQMod: 4}, 0},               // not over the limit
		{Params{Mode: ModeWriteBW, Size: 65536, CQMod: 4, PostList: 8}, 1}, // -Q given: the list sets nothing
		{Params{Mode: ModeWriteBW, PostList: 8}, 1},
		{Params{Mode: ModeSendBW, Size: 65536, CQMod: 1, PostList: 4}, 0},
	} {
		if got := tc.p.Notices(); len(got) != tc.want {
			t.Errorf("%+v: %q, want %d lines", tc.p, got, tc.want)
		}
	}
	var text strings.Builder
	PrintHeader(&text, &Report{Params: Params{Mode: ModeSendBW, PostList: 8, CQMod: 4, Iters: 400, RxDepth: 512}})
	h := text.String()
	if i, j := strings.Index(h, " Post List       : 8"), strings.Index(h, " RX depth        : 400"); i < 0 || j < i {
		t.Fatalf("a send_bw server's header puts Post List before RX depth, as perftest's:\n%s", h)
	}
}
