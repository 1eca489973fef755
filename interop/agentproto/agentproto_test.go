package agentproto

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFrameRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		typ     byte
		payload []byte
	}{
		{"empty", TypeStdinEOF, nil},
		{"nonce", TypeSync, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{"magic inside payload", TypeStdout, []byte("xxGRIAGRIAyy")},
		{"max", TypeStdout, bytes.Repeat([]byte{0xA5}, MaxPayload)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// garbage, a partial magic and zero padding before the frame must be skipped
			stream := append([]byte("noise GRI\x00\x00"), AppendFrame(nil, tt.typ, tt.payload)...)
			r := NewReader(bytes.NewReader(stream), 0)
			typ, p, err := r.ReadFrame()
			if err != nil {
				t.Fatalf("ReadFrame: %v", err)
			}
			if typ != tt.typ || !bytes.Equal(p, tt.payload) {
				t.Fatalf("got type %q %d bytes, want %q %d bytes", typ, len(p), tt.typ, len(tt.payload))
			}
			if _, _, err := r.ReadFrame(); err != io.EOF {
				t.Fatalf("after the frame: err %v, want io.EOF", err)
			}
		})
	}
}

func TestFrameHeaderBytes(t *testing.T) {
	got := AppendFrame(nil, TypeExit, []byte("{}"))
	want := []byte{'G', 'R', 'I', 'A', 'X', 0, 0, 0, 2, '{', '}'}
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendFrame = % x, want % x", got, want)
	}
}

func TestFrameTruncated(t *testing.T) {
	full := AppendFrame(nil, TypeStdout, []byte("hello"))
	for n := len(magic) + 1; n < len(full); n++ {
		_, _, err := NewReader(bytes.NewReader(full[:n]), 0).ReadFrame()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("truncated to %d bytes: err %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
}

func TestFrameTooLarge(t *testing.T) {
	big := AppendFrame(nil, TypeStdout, make([]byte, 100))
	next := AppendFrame(nil, TypeExit, []byte("{}"))
	r := NewReader(bytes.NewReader(append(big, next...)), 50)
	_, _, err := r.ReadFrame()
	var fe *FrameError
	if !errors.As(err, &fe) || !errors.Is(err, ErrFrameTooLarge) || fe.Len != 100 {
		t.Fatalf("err = %v, want *FrameError wrapping ErrFrameTooLarge with Len 100", err)
	}
	// the reader resynchronises on the next magic (the big payload is skipped byte-wise)
	typ, p, err := r.ReadFrame()
	if err != nil || typ != TypeExit || string(p) != "{}" {
		t.Fatalf("after resync: %q %q %v", typ, p, err)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, TypeStdout, []byte("abc")))
	f.Add(append([]byte("GRIAGR"), AppendFrame(nil, TypeExit, []byte(`{"code":3}`))...))
	f.Add([]byte("GRIAO\xff\xff\xff\xff"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), 64)
		for i := 0; i < len(data)+1; i++ {
			typ, p, err := r.ReadFrame()
			if err != nil {
				var fe *FrameError
				if errors.As(err, &fe) {
					continue
				}
				return
			}
			if len(p) > 64 {
				t.Fatalf("payload %d bytes exceeds the limit", len(p))
			}
			// re-encoding must read back identically
			typ2, p2, err := NewReader(bytes.NewReader(AppendFrame(nil, typ, p)), 64).ReadFrame()
			if err != nil || typ2 != typ || !bytes.Equal(p, p2) {
				t.Fatalf("round trip of %q/%x: %q/%x %v", typ, p, typ2, p2, err)
			}
		}
	})
}

// startAgent serves n ports as unix sockets in a temporary run directory, the way qemu
// exports the virtio-serial ports, and returns that directory.
func startAgent(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	srv := &Server{BaseEnv: []string{"PATH=/usr/bin:/bin", "AGENT_TEST=1"}, Dir: dir, Grace: 200 * time.Millisecond}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // runs last: cleanups are LIFO and the listeners close first
	for i := 0; i < n; i++ {
		ln, err := net.Listen("unix", filepath.Join(dir, "agent."+string(rune('0'+i))+".sock"))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = srv.Serve(c)
				c.Close()
			}
		}()
		t.Cleanup(func() { ln.Close() })
	}
	return dir
}

func TestRun(t *testing.T) {
	dir := startAgent(t, 2)
	c := &Client{RunDir: dir, PortWait: 5 * time.Second}
	tests := []struct {
		name       string
		req        Request
		stdin      string
		wantOut    string
		wantErr    string
		wantCode   int
		wantTimout bool
	}{
		{name: "status and streams", req: Request{Script: "echo out; echo err >&2; exit 3"}, wantOut: "out\n", wantErr: "err\n", wantCode: 3},
		{name: "env", req: Request{Script: `echo "$AGENT_TEST$X"`, Env: []string{"X=2"}}, wantOut: "12\n"},
		{name: "stdin", req: Request{Script: "tr a-z A-Z"}, stdin: "hello", wantOut: "HELLO"},
		{name: "no stdin", req: Request{Script: "cat; echo done"}, wantOut: "done\n"},
		{name: "timeout", req: Request{Script: "echo start; sleep 30", TimeoutMS: 300}, wantOut: "start\n", wantCode: CodeTimeout, wantTimout: true},
		{name: "signal", req: Request{Script: "kill -9 $$"}, wantCode: 128 + 9},
		{name: "large output", req: Request{Script: "head -c 100000 /dev/zero | tr '\\0' x"}, wantOut: strings.Repeat("x", 100000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			var in io.Reader
			if tt.stdin != "" {
				in = strings.NewReader(tt.stdin)
			}
			ex, err := c.Run(context.Background(), tt.req, in, &out, &errb)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if ex.Code != tt.wantCode || ex.TimedOut != tt.wantTimout {
				t.Errorf("exit %+v, want code %d timedOut %v", ex, tt.wantCode, tt.wantTimout)
			}
			if out.String() != tt.wantOut || errb.String() != tt.wantErr {
				t.Errorf("stdout %.40q stderr %q, want %.40q %q", out.String(), errb.String(), tt.wantOut, tt.wantErr)
			}
		})
	}
}

// TestConcurrentAndAbandoned runs a server-like and a client-like command at once, and checks
// that a port whose previous client vanished mid-command serves the next one cleanly.
func TestConcurrentAndAbandoned(t *testing.T) {
	dir := startAgent(t, 2)
	c := &Client{RunDir: dir, PortWait: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	serverDone := make(chan error, 1)
	go func() {
		_, err := c.Run(ctx, Request{Script: "echo listening; exec sleep 60"}, nil, io.Discard, nil)
		serverDone <- err
	}()
	time.Sleep(200 * time.Millisecond)
	var out bytes.Buffer
	ex, err := c.Run(context.Background(), Request{Script: "echo client"}, nil, &out, nil)
	if err != nil || ex.Code != 0 || out.String() != "client\n" {
		t.Fatalf("second command while the first runs: %+v %v %q", ex, err, out.String())
	}
	cancel() // abandon the "server": the agent must kill it and free the port
	select {
	case err := <-serverDone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("abandoned run: err %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("abandoned run did not return")
	}
	for i := 0; i < 4; i++ { // every port is usable again, with no leftovers in its stream
		out.Reset()
		ex, err := c.Run(context.Background(), Request{Script: "echo again"}, nil, &out, nil)
		if err != nil || ex.Code != 0 || out.String() != "again\n" {
			t.Fatalf("run %d after abandon: %+v %v %q", i, ex, err, out.String())
		}
	}
}

// TestAbandonKillsSession: a client that goes away must take down what its command
// started, including children that moved to another process group, as timeout(1) does.
func TestAbandonKillsSession(t *testing.T) {
	if _, err := exec.LookPath("timeout"); err != nil {
		t.Skip("no timeout(1) on this machine")
	}
	dir := startAgent(t, 1)
	pidFile := filepath.Join(dir, "child.pid")
	c := &Client{RunDir: dir, PortWait: 5 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// timeout(1) runs the shell in a new process group; that shell records its pid
		_, _ = c.Run(ctx, Request{Script: "timeout 60 sh -c 'echo $$ > " + pidFile + "; exec sleep 60'"}, nil, nil, nil)
	}()
	var pid int
	for i := 0; i < 100 && pid == 0; i++ {
		time.Sleep(50 * time.Millisecond)
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid == 0 {
		t.Fatal("the command never started")
	}
	cancel()
	<-done
	for i := 0; i < 100; i++ {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return // gone (or a zombie waiting for timeout(1), itself killed)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("pid %d (in timeout's own process group) survived its abandoned session", pid)
}

func TestNoAgent(t *testing.T) {
	_, err := (&Client{RunDir: t.TempDir()}).Run(context.Background(), Request{Script: "true"}, nil, nil, nil)
	if !errors.Is(err, ErrNoAgent) {
		t.Fatalf("err %v, want ErrNoAgent", err)
	}
}

func TestBadRequest(t *testing.T) {
	a, b := net.Pipe()
	go func() { _ = (&Server{}).Serve(b) }()
	defer a.Close()
	go func() { _, _ = a.Write(AppendFrame(nil, TypeCommand, []byte("{not json"))) }()
	r := NewReader(a, 0)
	typ, p, err := r.ReadFrame()
	if err != nil || typ != TypeExit || !strings.Contains(string(p), `"code":255`) || !strings.Contains(string(p), "bad request") {
		t.Fatalf("got %q %s %v, want an exit frame with code 255 and an error", typ, p, err)
	}
}
