package memlink

import (
	"errors"
	"io"
	"testing"
)

// TestBadOffsets: API misuse on a memlink endpoint gets an error or a
// shorter batch, never a panic (both slicings used to panic, and with the
// pipe's lock held): a Write offset outside a buffer stops the batch with
// an error after the frames before it; a Read with a negative offset, a
// first buffer no longer than the offset, or fewer sizes than buffers.
func TestBadOffsets(t *testing.T) {
	a, b, err := Pair(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	if n, err := a.Write(frames(2, 60), -1); n != 0 || err == nil {
		t.Fatalf("Write with offset -1 = %d, %v; want 0 and an error", n, err)
	}
	// Frames behind 40 bytes of headroom; the second buffer is shorter
	// than the headroom.
	bufs := make([][]byte, 3)
	for i, f := range frames(3, 60) {
		bufs[i] = append(make([]byte, 40), f...)
	}
	bufs[1] = bufs[1][:30]
	if n, err := a.Write(bufs, 40); n != 1 || err == nil {
		t.Fatalf("Write with a buffer shorter than the offset = %d, %v; want 1 and an error", n, err)
	}
	if got := readN(t, b, 1); len(got[0]) != 60 || seqOf(got[0]) != 0 {
		t.Fatalf("read %x", got[0])
	}
	writeAll(t, a, frames(2, 60))
	bufs = [][]byte{make([]byte, 100), make([]byte, 100)}
	if _, err := b.Read(bufs, make([]int, 2), -1); err == nil {
		t.Fatal("Read with offset -1 succeeded")
	}
	if _, err := b.Read(bufs, make([]int, 2), 100); !errors.Is(err, io.ErrShortBuffer) {
		t.Fatalf("Read with offset 100 into 100-byte buffers: %v, want io.ErrShortBuffer", err)
	}
	sizes := make([]int, 1)
	n, err := b.Read(bufs, sizes, 0) // one size for two buffers
	if err != nil || n != 1 || sizes[0] != 60 {
		t.Fatalf("Read with one size = %d, %v (size %d); want 1 frame of 60", n, err, sizes[0])
	}
}
