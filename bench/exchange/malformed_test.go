package exchange_test

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/bench/exchange"
)

const (
	goodPP  = "0000:000027:6698b8:00000000000000000000ffff0a4d0003\x00"
	goodKey = "0000:0001:00002f:ae5a0f:00001fd9:000055b8433c3000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:03:00000000:\x00"
	goodK59 = "0000:0080:000031:fae476:0000210c:000055c59e80f000:00000000\x00"
)

func set(s string, off int, c byte) string { b := []byte(s); b[off] = c; return string(b) }

func TestParseMalformed(t *testing.T) {
	type parser func([]byte) error
	pp := func(b []byte) error { _, err := exchange.ParsePingpong(b); return err }
	kg := func(b []byte) error { _, err := exchange.ParsePerftestGID(b); return err }
	k := func(b []byte) error { _, err := exchange.ParsePerftest(b); return err }
	ver := func(b []byte) error { _, err := exchange.ParseVersion(b); return err }
	mtu := func(b []byte) error { _, err := exchange.ParseMTU(b); return err }
	for _, tc := range []struct {
		name  string
		parse parser
		in    string
		field string
		want  error
	}{
		{"pp empty", pp, "", "length", exchange.ErrLength},
		{"pp short", pp, goodPP[:51], "length", exchange.ErrLength},
		{"pp long", pp, goodPP + "x", "length", exchange.ErrLength},
		{"pp no NUL", pp, set(goodPP, 51, '0'), "terminator", exchange.ErrTerminator},
		{"pp sep", pp, set(goodPP, 4, '-'), "separator@4", exchange.ErrSeparator},
		{"pp sep2", pp, set(goodPP, 18, 0), "separator@18", exchange.ErrSeparator},
		{"pp LID hex", pp, set(goodPP, 0, 'g'), "LID", exchange.ErrHex},
		{"pp QPN upper", pp, set(goodPP, 10, 'A'), "QPN", exchange.ErrHex},
		{"pp PSN space", pp, set(goodPP, 12, ' '), "PSN", exchange.ErrHex},
		{"pp GID hex", pp, set(goodPP, 50, 'z'), "GID", exchange.ErrHex},
		{"key short", kg, goodKey[:107], "length", exchange.ErrLength},
		{"key no NUL", kg, set(goodKey, 107, ':'), "terminator", exchange.ErrTerminator},
		{"key sep", kg, set(goodKey, 9, '.'), "separator@9", exchange.ErrSeparator},
		{"key LID", kg, set(goodKey, 3, 'x'), "LID", exchange.ErrHex},
		{"key OUT", kg, set(goodKey, 5, '-'), "OUT_READS", exchange.ErrHex},
		{"key QPN", kg, set(goodKey, 15, 'G'), "QPN", exchange.ErrHex},
		{"key PSN", kg, set(goodKey, 17, '+'), "PSN", exchange.ErrHex},
		{"key RKEY", kg, set(goodKey, 31, 'q'), "RKEY", exchange.ErrHex},
		{"key VADDR", kg, set(goodKey, 40, 'X'), "VADDR", exchange.ErrHex},
		{"key GID byte", kg, set(goodKey, 51, 'k'), "GID[0]", exchange.ErrHex},
		{"key GID sep", kg, set(goodKey, 55, '0'), "separator@55", exchange.ErrSeparator},
		{"key GID last", kg, set(goodKey, 96, 'k'), "GID[15]", exchange.ErrHex},
		{"key SRQN", kg, set(goodKey, 100, 'k'), "SRQN", exchange.ErrHex},
		{"key last sep", kg, set(goodKey, 106, 0), "separator@106", exchange.ErrSeparator},
		{"key59 as GID", kg, goodK59, "length", exchange.ErrLength},
		{"key59 short", k, goodK59[:58], "length", exchange.ErrLength},
		{"key59 SRQN", k, set(goodK59, 57, 'z'), "SRQN", exchange.ErrHex},
		{"key59 no NUL", k, set(goodK59, 58, '0'), "terminator", exchange.ErrTerminator},
		{"key59 sep", k, set(goodK59, 49, '0'), "separator@49", exchange.ErrSeparator},
		{"version short", ver, "6.06", "length", exchange.ErrLength},
		{"version no NUL", ver, strings.Repeat("6", 16), "terminator", exchange.ErrTerminator},
		{"version padding", ver, "6.06\x00\x00x\x00\x00\x00\x00\x00\x00\x00\x00\x00", "padding", exchange.ErrTerminator},
		{"version empty", ver, strings.Repeat("\x00", 16), "text", exchange.ErrVersion},
		{"version text", ver, "abc\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "text", exchange.ErrVersion},
		{"version two dots", ver, "6.0.6\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "text", exchange.ErrVersion},
		{"version dot last", ver, "6.\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "text", exchange.ErrVersion},
		{"mtu 1 byte", mtu, "3", "length", exchange.ErrLength},
		{"mtu 3 bytes", mtu, "3\x00\x00", "length", exchange.ErrLength},
		{"mtu zero", mtu, "0\x00", "value", exchange.ErrMTU},
		{"mtu six", mtu, "6\x00", "value", exchange.ErrMTU},
		{"mtu no NUL", mtu, "33", "value", exchange.ErrMTU},
		{"mtu letter", mtu, "a\x00", "value", exchange.ErrMTU},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse([]byte(tc.in))
			var pe *exchange.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T), want *ParseError", err, err)
			}
			if !errors.Is(err, tc.want) || pe.Field != tc.field {
				t.Errorf("got field %q cause %v, want field %q cause %v", pe.Field, pe.Err, tc.field, tc.want)
			}
			if len(pe.Got) == 0 && len(tc.in) > 0 || len(pe.Got) > 64 {
				t.Errorf("Got = %q: want the offending bytes (at most 64)", pe.Got)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("message %q does not name field %q", err, tc.field)
			}
		})
	}
}

// TestSessionShortAndBad feeds broken peer streams to every step and checks
// the typed errors (and that nothing hangs or panics).
func TestSessionShortAndBad(t *testing.T) {
	ver := "6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	pre := ver + "\x00\x00\x10\x00" + "\x00\x00\x00\x40" + "3\x00"
	okSteps := exchange.Steps{
		LocalMTU: 3,
		Sys:      exchange.SysData{CycleBuffer: 4096, CacheLineSize: 64},
		Setup: func(exchange.Params) ([]exchange.PerftestDest, error) {
			return []exchange.PerftestDest{{QPN: 0x11, PSN: 1}}, nil
		},
		Connect: func([]exchange.PerftestDest) error { return nil },
	}
	for _, tc := range []struct {
		name string
		peer string
		step string
		want error
	}{
		{"nothing", "", "exchange_versions", io.EOF},
		{"half version", ver[:7], "exchange_versions", io.ErrUnexpectedEOF},
		{"garbage version", "hello world!\x00\x00\x00\x00", "exchange_versions", exchange.ErrVersion},
		{"short sysdata", ver + "\x00\x00", "check_sys_data cycle_buffer", exchange.ErrShortRead},
		{"no cache line", ver + "\x00\x00\x10\x00", "check_sys_data cache_line_size", io.EOF},
		{"bad mtu", ver + "\x00\x00\x10\x00\x00\x00\x00\x40" + "9\x00", "check_mtu", exchange.ErrMTU},
		{"short keys", pre + goodKey[:50], "ctx_hand_shake #1", io.ErrUnexpectedEOF},
		{"bad keys", pre + set(goodKey, 20, 'Z'), "ctx_hand_shake #1", exchange.ErrHex},
		{"bad done", pre + strings.Repeat(goodKey, 5) + "DONE\x00", `ctx_close_connection read "done"`, exchange.ErrDone},
		{"half done", pre + strings.Repeat(goodKey, 5) + "do", `ctx_close_connection read "done"`, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess, err := exchange.NewPerftestSession(&scripted{in: strings.NewReader(tc.peer)}, exchange.PerftestConfig{Role: exchange.Server})
			if err != nil {
				t.Fatal(err)
			}
			_, err = sess.Run(exchange.SendBW, okSteps)
			var se *exchange.StepError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T), want *StepError", err, err)
			}
			if se.Step != tc.step || !errors.Is(err, tc.want) {
				t.Errorf("got step %q err %v; want step %q wrapping %v", se.Step, err, tc.step, tc.want)
			}
		})
	}
	t.Run("done missing is accepted", func(t *testing.T) {
		// perftest releases newer than 6.06 close the socket without "done".
		conn := &scripted{in: strings.NewReader(pre + strings.Repeat(goodKey, 5))}
		sess, _ := exchange.NewPerftestSession(conn, exchange.PerftestConfig{Role: exchange.Server})
		if _, err := sess.Run(exchange.SendBW, okSteps); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if !strings.HasSuffix(conn.out.String(), "done\x00") {
			t.Errorf("we did not send done: %q", conn.out.String())
		}
	})
}

// TestCloseConnectionPeerGone: the peer resets the connection around the
// final "done" (perftest closes with our "done" unread, so its kernel
// answers with RST, as the captures show).
func TestCloseConnectionPeerGone(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	pipe := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name     string
		readErr  error
		writeErr error
		ok       bool
	}{
		{"reset on read", reset, nil, true},
		{"broken pipe on write", nil, pipe, true},
		{"timeout on read", timeout, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &faulty{in: strings.NewReader(goodKey), readErr: tc.readErr, writeErr: tc.writeErr, writesOK: 1}
			s, _ := exchange.NewPerftestSession(c, exchange.PerftestConfig{Role: exchange.Client})
			_, err := s.CloseConnection(exchange.PerftestDest{})
			if (err == nil) != tc.ok {
				t.Errorf("err = %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("err = %v does not wrap the deadline error", err)
			}
		})
	}
}

// faulty plays a peer stream, then fails reads with readErr; writes after
// the first writesOK fail with writeErr (when set).
type faulty struct {
	in       io.Reader
	readErr  error
	writeErr error
	writesOK int
}

func (c *faulty) Read(b []byte) (int, error) {
	n, err := c.in.Read(b)
	if err == io.EOF && c.readErr != nil {
		return n, c.readErr
	}
	return n, err
}

func (c *faulty) Write(b []byte) (int, error) {
	if c.writesOK == 0 && c.writeErr != nil {
		return 0, c.writeErr
	}
	c.writesOK--
	return len(b), nil
}

// scripted is a connection whose peer sends a fixed byte stream and then
// closes; what we write is collected.
type scripted struct {
	in  io.Reader
	out strings.Builder
}

func (c *scripted) Read(b []byte) (int, error)  { return c.in.Read(b) }
func (c *scripted) Write(b []byte) (int, error) { return c.out.Write(b) }
