package agentproto

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client runs commands in the guest through the unix sockets qemu exports for the agent's
// virtio-serial ports (RunDir/agent.N.sock). Each call takes a free port under an flock on
// RunDir/agent.N.lock, so concurrent calls (from goroutines or from other processes, e.g.
// the shell scripts) never share a port.
type Client struct {
	RunDir string
	// PortWait bounds how long a call waits for a free port and for the guest to answer the
	// sync; 30 s if zero.
	PortWait time.Duration
	// SyncTimeout bounds the sync handshake on one port (3 s if zero): qemu accepts
	// connections on a port the guest does not serve yet, which then never answers.
	SyncTimeout time.Duration
}

// ErrNoAgent is returned when no agent socket exists (the VM is not up).
var ErrNoAgent = errors.New("agentproto: no agent sockets (is the VM up?)")

func (c *Client) portWait() time.Duration {
	if c.PortWait > 0 {
		return c.PortWait
	}
	return 30 * time.Second
}

// conn is one connected, locked, synchronised port.
type conn struct {
	nc   net.Conn
	lock *os.File
	rd   *Reader
	wmu  sync.Mutex // serialises frame writes
}

func (cn *conn) send(typ byte, p []byte) error {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	_, err := cn.nc.Write(AppendFrame(nil, typ, p))
	return err
}

func (cn *conn) close() {
	cn.nc.Close()
	cn.lock.Close() // releases the flock
}

// dial takes the first free port and performs the sync handshake.
func (c *Client) dial(ctx context.Context) (*conn, error) {
	socks, _ := filepath.Glob(filepath.Join(c.RunDir, "agent.*.sock"))
	if len(socks) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoAgent, c.RunDir)
	}
	sort.Strings(socks)
	return c.dialSocks(ctx, socks)
}

func (c *Client) dialSocks(ctx context.Context, socks []string) (*conn, error) {
	deadline := time.Now().Add(c.portWait())
	var lastErr error
	for {
		for _, sock := range socks {
			lf, err := os.OpenFile(strings.TrimSuffix(sock, ".sock")+".lock", os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				return nil, err
			}
			if syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
				lf.Close()
				continue
			}
			nc, err := net.Dial("unix", sock)
			if err != nil {
				lf.Close()
				lastErr = err
				continue
			}
			cn := &conn{nc: nc, lock: lf, rd: NewReader(nc, MaxPayload)}
			if err := cn.sync(ctx, deadline, c.SyncTimeout); err != nil {
				cn.close()
				lastErr = err
				continue
			}
			return cn, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			if lastErr == nil {
				lastErr = errors.New("all ports busy")
			}
			return nil, fmt.Errorf("agentproto: no usable agent port in %s: %w", c.RunDir, lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sync sends padding plus a sync frame and discards input up to the matching ack.
func (cn *conn) sync(ctx context.Context, deadline time.Time, timeout time.Duration) error {
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	// Padding longer than any frame completes a frame a killed client left half-written.
	msg := AppendFrame(make([]byte, MaxPayload+HeaderLen), TypeSync, nonce)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// A port nobody serves (guest still booting) accepts the connection but never answers.
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	if sd := time.Now().Add(timeout); sd.Before(deadline) {
		deadline = sd
	}
	_ = cn.nc.SetDeadline(deadline)
	defer cn.nc.SetDeadline(time.Time{})
	if _, err := cn.nc.Write(msg); err != nil {
		return err
	}
	for {
		typ, p, err := cn.rd.ReadFrame()
		if err != nil {
			var fe *FrameError
			if errors.As(err, &fe) {
				continue
			}
			return err
		}
		if typ == TypeSyncAck && bytes.Equal(p, nonce) {
			return nil
		}
	}
}

// Wait blocks until the guest agent answers, or ctx ends. It polls one port at a time with a
// short sync timeout so that a booting guest is noticed within about a second.
func (c *Client) Wait(ctx context.Context) error {
	short := &Client{RunDir: c.RunDir, PortWait: 500 * time.Millisecond, SyncTimeout: time.Second}
	for i := 0; ; i++ {
		socks, _ := filepath.Glob(filepath.Join(c.RunDir, "agent.*.sock"))
		sort.Strings(socks)
		var cn *conn
		err := fmt.Errorf("%w in %s", ErrNoAgent, c.RunDir)
		if len(socks) > 0 {
			cn, err = short.dialSocks(ctx, socks[i%len(socks):i%len(socks)+1])
		}
		if err == nil {
			cn.close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agentproto: guest agent not answering: %w (last: %v)", ctx.Err(), err)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// Run executes req in the guest. Output streams to stdout and stderr (either may be nil);
// stdin, if not nil, is forwarded until EOF. The error is non-nil only when the agent could
// not be reached or the connection broke: a command that fails is reported in Exit.
// When ctx ends the connection is dropped, which makes the guest kill the command.
func (c *Client) Run(ctx context.Context, req Request, stdin io.Reader, stdout, stderr io.Writer) (Exit, error) {
	cn, err := c.dial(ctx)
	if err != nil {
		return Exit{Code: CodeAgentFail}, err
	}
	defer cn.close()
	return cn.run(ctx, req, stdin, stdout, stderr)
}

func (cn *conn) run(ctx context.Context, req Request, stdin io.Reader, stdout, stderr io.Writer) (Exit, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	b, err := json.Marshal(req)
	if err != nil {
		return Exit{Code: CodeAgentFail}, err
	}
	if len(b) > MaxPayload {
		return Exit{Code: CodeAgentFail}, fmt.Errorf("agentproto: command too long (%d bytes, max %d)", len(b), MaxPayload)
	}
	if err := cn.send(TypeCommand, b); err != nil {
		return Exit{Code: CodeAgentFail}, err
	}
	if stdin == nil {
		if err := cn.send(TypeStdinEOF, nil); err != nil {
			return Exit{Code: CodeAgentFail}, err
		}
	} else {
		go func() {
			buf := make([]byte, MaxPayload)
			for {
				n, err := stdin.Read(buf)
				if n > 0 && cn.send(TypeStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					_ = cn.send(TypeStdinEOF, nil)
					return
				}
			}
		}()
	}
	stop := context.AfterFunc(ctx, func() { cn.nc.Close() })
	defer stop()
	for {
		typ, p, err := cn.rd.ReadFrame()
		if err != nil {
			var fe *FrameError
			if errors.As(err, &fe) {
				continue
			}
			if ctx.Err() != nil {
				return Exit{Code: CodeAgentFail}, ctx.Err()
			}
			return Exit{Code: CodeAgentFail}, fmt.Errorf("agentproto: connection lost: %w", err)
		}
		switch typ {
		case TypeStdout:
			_, _ = stdout.Write(p)
		case TypeStderr:
			_, _ = stderr.Write(p)
		case TypeExit:
			var ex Exit
			if err := json.Unmarshal(p, &ex); err != nil {
				return Exit{Code: CodeAgentFail}, fmt.Errorf("agentproto: bad exit frame: %w", err)
			}
			return ex, nil
		}
	}
}
