//go:build linux

package udp

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/wire"
)

// A run cut at the GSO cap (62 segments of 1040 bytes in 64 KiB) must not
// leave the rest of its flow to go packet by packet over IPv4, where a run
// no longer than maxRoCEPacket cannot be a super-datagram: the 64 packets
// of a 64 KiB message at IB MTU 1024 leave as 60 + 4 segments (two GSO
// skbs), not 62 + 1 + 1 (leaveTail). Every frame arrives, in order. (A
// Write takes at most BatchSize = 64 frames per sendmmsg, as many as the
// HCA's transmit batch holds.)
func TestGSOTailBalanced(t *testing.T) {
	ns := newNetNS(t)
	for _, tc := range []struct {
		n, short int // frames of 1024 payload bytes, then one of short bytes (0: none)
		batches  int // GSO super-datagrams
		singles  int // frames sent as datagrams of their own
	}{
		{n: 64, batches: 2},             // 60 + 4 (62 + 1 + 1 without balancing)
		{n: 63, batches: 2},             // 59 + 4 (62 + 1)
		{n: 63, short: 200, batches: 2}, // 59 + 4 + the short one (62 + 1 + 1)
		{n: 40, batches: 1},             // one run
		{n: 62, short: 200, batches: 1}, // one run: the short one ends it
	} {
		t.Run(fmt.Sprintf("%d+%d", tc.n, tc.short), func(t *testing.T) {
			a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", nil)
			defer a.Close()
			defer b.Close()
			if !a.GSO() {
				t.Skip("kernel has no UDP_SEGMENT")
			}
			frames := mustFrames(t, a, b, 0, tc.n, 1024)
			if tc.short > 0 {
				frames = append(frames, mustFrames(t, a, b, tc.n, 1, tc.short)...)
			}
			if w, err := a.Write(frames, 0); w != len(frames) || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			readFrames(t, b, len(frames), func(got int, p *wire.Packet) {
				if psn := int(p.BTH().PSN()); psn != got {
					t.Fatalf("frame %d has PSN %d", got, psn)
				}
			})
			st := a.Stats()
			if int(st.TxGSOBatches) != tc.batches || int(st.TxGSOSegments) != len(frames)-tc.singles {
				t.Errorf("%d GSO batches of %d segments in all, want %d of %d (%+v)",
					st.TxGSOBatches, st.TxGSOSegments, tc.batches, len(frames)-tc.singles, st)
			}
		})
	}
}
