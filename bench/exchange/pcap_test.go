package exchange_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/pcaptest"
)

// capturesDir holds the shared golden captures (kernel rxe <-> kernel rxe);
// tests read them in place and skip when they are absent.
var capturesDir = filepath.Join("..", "..", "..", "shared", "captures")

// tcpStreams is the reassembled payload of the out-of-band TCP connection
// (port 18515) of one capture, one byte stream per direction.
type tcpStreams = pcaptest.TCPStreams

func loadStreams(t *testing.T, name string) tcpStreams {
	t.Helper()
	return loadStreamsFrom(t, capturesDir, name)
}

// loadStreamsFrom is loadStreams for a capture in dir.
func loadStreamsFrom(t *testing.T, dir, name string) tcpStreams {
	t.Helper()
	path := filepath.Join(dir, name)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("golden capture %s not present (needs the shared captures beside the repo)", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := pcaptest.ExtractTCP(data, 18515)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

// TestExtractTCPRejectsGarbage checks the reader itself fails on bad input
// rather than yielding empty streams.
func TestExtractTCPRejectsGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, make([]byte, 24), []byte("not a pcap file at all, no")} {
		if _, err := pcaptest.ExtractTCP(b, 18515); err == nil {
			t.Errorf("pcaptest.ExtractTCP(%q) = nil error", b)
		}
	}
}
