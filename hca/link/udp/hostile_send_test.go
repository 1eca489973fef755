//go:build linux

package udp

import (
	"errors"
	"testing"
)

// TestWriteOffsetOutside: an offset outside a buffer is API misuse, which
// Write refuses with ErrBadFrame naming it (as the tun and afpacket links
// do) after sending the frames before it, instead of panicking on the
// slice.
func TestWriteOffsetOutside(t *testing.T) {
	ns := newNetNS(t)
	a, b := openPair(t, ns, "127.0.0.1", "127.0.0.2", nil)
	defer a.Close()
	defer b.Close()
	good := mustFrames(t, a, b, 0, 1, 64)[0]
	short := good[:10]
	for _, tc := range []struct {
		name   string
		bufs   [][]byte
		offset int
		want   int
	}{
		{"negative", [][]byte{good, good}, -1, 0},
		{"past-every-buffer", [][]byte{good, good}, len(good) + 1, 0},
		{"past-the-second", [][]byte{append(make([]byte, 20), good...), short}, 20, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.Stats()
			n, err := a.Write(tc.bufs, tc.offset)
			if n != tc.want || !errors.Is(err, ErrBadFrame) {
				t.Fatalf("Write = %d, %v; want %d, ErrBadFrame", n, err, tc.want)
			}
			st := a.Stats()
			if st.TxRejected != before.TxRejected+1 || st.TxFrames != before.TxFrames+uint64(tc.want) {
				t.Fatalf("stats %+v, before %+v: want one rejection, %d frames sent", st, before, tc.want)
			}
		})
	}
	readFrames(t, b, 1, nil) // the frame before the bad one went out
}
