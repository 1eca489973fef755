package exchange

import (
	"errors"
	"fmt"
	"io"

	"github.com/goroce/goroce/bth"
)

// Sentinel causes. Every error returned by this package wraps one of them
// (or an I/O error from the connection), so callers can use errors.Is.
var (
	// ErrLength: a message does not have the exact size the tools use.
	ErrLength = errors.New("wrong length")
	// ErrHex: a field is not the fixed number of lowercase hex digits that
	// the tools' printf formats produce.
	ErrHex = errors.New("bad hex")
	// ErrSeparator: a ':' is missing where the format has one.
	ErrSeparator = errors.New("missing ':' separator")
	// ErrTerminator: the trailing NUL (or the NUL padding) is missing.
	ErrTerminator = errors.New("missing NUL terminator")
	// ErrVersion: the perftest version string is not "<digits>[.<digits>]".
	ErrVersion = errors.New("bad version string")
	// ErrDone: the closing "done\x00" message is something else.
	ErrDone = errors.New(`expected "done\x00"`)
	// ErrMTU: the MTU message is not the ASCII decimal of an ibv_mtu value.
	ErrMTU = errors.New("bad MTU message")
	// ErrConfig: the caller passed values this package cannot send.
	ErrConfig = errors.New("invalid local parameters")
	// ErrShortRead: the peer closed the connection in the middle of a message.
	ErrShortRead = errors.New("short read")
	// ErrKeysChanged: the peer sent a QP's keys twice (before and after
	// ctx_connect) and they differ: it is out of step with the sequence.
	ErrKeysChanged = errors.New("a QP's keys changed between the two hand-shake rounds")
	// ErrQPCount: two of our QPs got the same remote QP in the first
	// round: the peer runs fewer QPs (-q) than we do. The keys carry no
	// count, so the peer's one set is read again for each of ours; left
	// alone, both sides would wait for each other for ever.
	ErrQPCount = errors.New("the peer runs fewer QPs than we do (run both sides with the same -q)")
	// ErrPeerQPN: a peer's keys name a QPN no data QP can have.
	ErrPeerQPN = errors.New("the peer's QPN is not a data QP")
)

// maxQuoted bounds how many bytes of a bad field an error keeps, so an error
// built from garbage stays small.
const maxQuoted = 64

// ParseError reports a message that cannot be decoded. Msg names the message
// ("pingpong", "perftest keys", ...), Field the field inside it, Got the bytes
// seen (at most 64 of them) and Err the cause (ErrHex, ErrLength, ...).
type ParseError struct {
	Msg   string
	Field string
	Got   []byte
	Err   error
}

func newParseError(msg, field string, got []byte, err error) *ParseError {
	if len(got) > maxQuoted {
		got = got[:maxQuoted]
	}
	return &ParseError{Msg: msg, Field: field, Got: append([]byte(nil), got...), Err: err}
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("exchange: %s: field %s: %v (got %q)", e.Msg, e.Field, e.Err, e.Got)
}

func (e *ParseError) Unwrap() error { return e.Err }

// StepError reports which step of a session failed ("exchange_versions",
// "ctx_hand_shake #3", "read remote address", ...) and why. Err is a
// *ParseError, a *ShortReadError, or the connection's own error (a timeout
// from a deadline set by the caller, io.EOF, ...).
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return "exchange: " + e.Step + ": " + e.Err.Error() }

func (e *StepError) Unwrap() error { return e.Err }

// ShortReadError reports that the peer closed the connection after Got of the
// Want bytes of a message. It matches ErrShortRead and io.ErrUnexpectedEOF
// (or io.EOF when Got is 0).
type ShortReadError struct {
	Want, Got int
}

func (e *ShortReadError) Error() string {
	if e.Got == 0 {
		// Most often the peer gave up on an error of its own (a QP it
		// could not connect, an option it refused): say where to look.
		return fmt.Sprintf("short read: the peer closed the connection instead of sending %d bytes (its own output says why)", e.Want)
	}
	return fmt.Sprintf("short read: got %d of %d bytes", e.Got, e.Want)
}

// Is lets errors.Is match ErrShortRead and the io package's EOF errors.
func (e *ShortReadError) Is(target error) bool {
	switch target {
	case ErrShortRead:
		return true
	case io.ErrUnexpectedEOF:
		return e.Got > 0
	case io.EOF:
		return e.Got == 0
	}
	return false
}

// readFull reads exactly len(b) bytes. A peer that closes early gives a
// *ShortReadError; other read errors (deadlines) are returned as they are.
func readFull(r io.Reader, b []byte) error {
	n, err := io.ReadFull(r, b)
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &ShortReadError{Want: len(b), Got: n}
	}
	return err
}

// writeAll writes b with a single Write call. The tools read most messages
// with one read(2) and fail when it returns less than the full message, so a
// message must never be split across writes on our side.
func writeAll(w io.Writer, b []byte) error {
	n, err := w.Write(b)
	if err != nil {
		return err
	}
	if n != len(b) {
		return io.ErrShortWrite
	}
	return nil
}

// CheckDataQPN reports whether q can be a peer's data QP: not 0 and 1 (the
// SMI and GSI QPs, which the tools never use) and not 0xFFFFFF (the
// multicast QPN). The exchange formats carry any 24-bit value, and for UD
// nothing below would refuse one: the SENDs would go to the peer's GSI.
func CheckDataQPN(q bth.QPN) error {
	switch q {
	case 0, 1, bth.MulticastQPN:
		return fmt.Errorf("%w: %#06x (0 and 1 are the special QPs, 0xffffff the multicast QPN)", ErrPeerQPN, uint32(q))
	}
	return nil
}
