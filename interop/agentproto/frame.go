package agentproto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame types.
const (
	TypeSync     = 'S' // host->guest: nonce
	TypeCommand  = 'C' // host->guest: JSON Request
	TypeStdin    = 'I' // host->guest: stdin bytes
	TypeStdinEOF = 'E' // host->guest: end of stdin
	TypeSignal   = 'K' // host->guest: one byte, a signal number for the command's process group
	TypeSyncAck  = 'A' // guest->host: the nonce of the sync being answered
	TypeStdout   = 'O' // guest->host: stdout bytes
	TypeStderr   = 'R' // guest->host: stderr bytes
	TypeExit     = 'X' // guest->host: JSON Exit, the last frame of a command
)

// MaxPayload is the largest payload in either direction. virtio_console hands writes of up
// to 32 KiB to the host in one piece, so frames never interleave with a concurrent writer.
const MaxPayload = 16 << 10

// HeaderLen is the size of the frame header: magic, type, length.
const HeaderLen = 9

var magic = [4]byte{'G', 'R', 'I', 'A'}

// ErrFrameTooLarge is returned by ReadFrame for a header announcing more than the limit.
var ErrFrameTooLarge = errors.New("agentproto: frame payload too large")

// FrameError describes a frame that cannot be used (bad type or size).
type FrameError struct {
	Type byte
	Len  uint32
	Why  string
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("agentproto: bad frame type %q len %d: %s", e.Type, e.Len, e.Why)
}

// AppendFrame appends one frame to dst. A payload larger than MaxPayload must be split by
// the caller; AppendFrame panics on it because that is a programming error, not bad input.
func AppendFrame(dst []byte, typ byte, payload []byte) []byte {
	if len(payload) > MaxPayload {
		panic("agentproto: payload larger than MaxPayload")
	}
	dst = append(dst, magic[:]...)
	dst = append(dst, typ)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// Reader reads frames, skipping any bytes before the next magic.
type Reader struct {
	br  *bufio.Reader
	max int
	buf []byte
}

// NewReader returns a Reader accepting payloads up to max bytes (MaxPayload if max <= 0).
func NewReader(r io.Reader, max int) *Reader {
	if max <= 0 || max > MaxPayload {
		max = MaxPayload
	}
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), max: max, buf: make([]byte, max)}
}

// ReadFrame returns the next frame. The payload aliases an internal buffer that is valid
// until the next call. A frame whose header announces more than the limit yields a
// *FrameError wrapping ErrFrameTooLarge; the reader then resynchronises on the next magic.
func (r *Reader) ReadFrame() (typ byte, payload []byte, err error) {
	matched := 0
	for matched < len(magic) {
		c, err := r.br.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		switch {
		case c == magic[matched]:
			matched++
		case c == magic[0]:
			matched = 1
		default:
			matched = 0
		}
	}
	var h [5]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		return 0, nil, noEOF(err)
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > uint32(r.max) {
		return 0, nil, &FrameError{Type: h[0], Len: n, Why: ErrFrameTooLarge.Error()}
	}
	p := r.buf[:n]
	if _, err := io.ReadFull(r.br, p); err != nil {
		return 0, nil, noEOF(err)
	}
	return h[0], p, nil
}

// Unwrap lets errors.Is(err, ErrFrameTooLarge) work on size errors.
func (e *FrameError) Unwrap() error {
	if e.Why == ErrFrameTooLarge.Error() {
		return ErrFrameTooLarge
	}
	return nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
