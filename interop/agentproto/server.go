package agentproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Request is the body of a command frame.
type Request struct {
	Script    string   `json:"script"`               // run as /bin/sh -c Script
	Env       []string `json:"env,omitempty"`        // KEY=VALUE added to the server's base environment
	Dir       string   `json:"dir,omitempty"`        // working directory (server default if empty)
	TimeoutMS int64    `json:"timeout_ms,omitempty"` // kill the process group after this long; 0 = never
}

// Exit is the body of the exit frame.
type Exit struct {
	Code     int    `json:"code"`             // exit status; 128+Signal when killed; 124 on timeout
	Signal   int    `json:"signal,omitempty"` // signal that killed the command, if any
	TimedOut bool   `json:"timed_out,omitempty"`
	Error    string `json:"error,omitempty"` // set when the command could not be run at all
}

// Exit codes the agent reports itself (mirroring timeout(1) and sh).
const (
	CodeTimeout   = 124
	CodeNotFound  = 127
	CodeAgentFail = 255
)

// Server runs the commands it receives on one port, one at a time.
type Server struct {
	Shell   string   // default /bin/sh
	BaseEnv []string // environment of every command, before Request.Env
	Dir     string   // default working directory
	// Grace is how long the exit frame waits for output still buffered in the pipes once the
	// command exited; background children that keep the pipes open do not hold it up longer.
	Grace time.Duration
}

// portWriter serialises frames onto the port and drops those of superseded sessions.
type portWriter struct {
	mu    sync.Mutex // protects all fields
	w     io.Writer
	epoch uint64
	buf   []byte
}

var errStale = errors.New("agentproto: stale session")

func (pw *portWriter) send(epoch uint64, typ byte, p []byte) error {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if epoch != pw.epoch {
		return errStale
	}
	pw.buf = AppendFrame(pw.buf[:0], typ, p)
	_, err := pw.w.Write(pw.buf)
	return err
}

func (pw *portWriter) next() uint64 {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	pw.epoch++
	return pw.epoch
}

type session struct {
	mu       sync.Mutex // protects finished, timedOut
	cmd      *exec.Cmd
	finished bool
	timedOut bool
	stdin    chan []byte
	stdinEnd sync.Once
}

// signal delivers sig to everything the command started. The command runs in its own
// session (Setsid), and the whole session is signalled, not just the process group:
// timeout(1), which every matrix tool runs under, moves itself and its child into a new
// process group, so a group kill missed them and a killed ibv_rc_pingpong server lived on,
// holding TCP 18515 for the next case.
func (s *session) signal(sig syscall.Signal) {
	s.mu.Lock()
	finished := s.finished
	s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	sid := s.cmd.Process.Pid
	if !finished {
		_ = syscall.Kill(-sid, sig) // the session leader's group
	}
	// Members that left the group (but not the session) - even after the leader exited.
	for _, pid := range sessionMembers(sid) {
		_ = syscall.Kill(pid, sig)
	}
}

// sessionMembers lists the processes whose session ID is sid (from /proc/PID/stat).
func sessionMembers(sid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...; comm may contain spaces and ')'
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 3 {
			if s, err := strconv.Atoi(f[3]); err == nil && s == sid {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func (s *session) closeStdin() { s.stdinEnd.Do(func() { close(s.stdin) }) }

// Serve handles frames from rw until it reports an error (io.EOF when the host side goes
// away). Whatever command is running when Serve returns is killed. Serve may be called again
// on the same port afterwards: a virtio-serial port reads EOF while no host is connected.
func (srv *Server) Serve(rw io.ReadWriter) error {
	pw := &portWriter{w: rw}
	rd := NewReader(rw, MaxPayload)
	var cur *session
	abort := func() {
		if cur != nil {
			cur.closeStdin()
			cur.signal(syscall.SIGKILL)
			cur = nil
		}
	}
	defer func() { abort(); pw.next() }()
	for {
		typ, p, err := rd.ReadFrame()
		var fe *FrameError
		if errors.As(err, &fe) {
			continue // oversized header (garbage): resync on the next magic
		}
		if err != nil {
			return err
		}
		switch typ {
		case TypeSync:
			abort()
			e := pw.next()
			_ = pw.send(e, TypeSyncAck, p)
		case TypeCommand:
			abort()
			e := pw.next()
			var req Request
			if err := json.Unmarshal(p, &req); err != nil {
				b, _ := json.Marshal(Exit{Code: CodeAgentFail, Error: "bad request: " + err.Error()})
				_ = pw.send(e, TypeExit, b)
				continue
			}
			cur = srv.start(pw, e, req)
		case TypeStdin:
			if cur != nil {
				data := append([]byte(nil), p...) // p aliases the reader's buffer
				func() {
					defer func() { _ = recover() }() // stdin already closed: drop
					cur.stdin <- data
				}()
			}
		case TypeStdinEOF:
			if cur != nil {
				cur.closeStdin()
			}
		case TypeSignal:
			if cur != nil && len(p) == 1 {
				cur.signal(syscall.Signal(p[0]))
			}
		}
	}
}

func (srv *Server) start(pw *portWriter, epoch uint64, req Request) *session {
	s := &session{stdin: make(chan []byte, 64)}
	fail := func(code int, msg string) *session {
		b, _ := json.Marshal(Exit{Code: code, Error: msg})
		_ = pw.send(epoch, TypeExit, b)
		s.finished = true
		s.closeStdin()
		return s
	}
	shell := srv.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	cmd := exec.Command(shell, "-c", req.Script)
	cmd.Env = append(append([]string(nil), srv.BaseEnv...), req.Env...)
	if len(cmd.Env) == 0 {
		cmd.Env = os.Environ()
	}
	cmd.Dir = srv.Dir
	if req.Dir != "" {
		cmd.Dir = req.Dir
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // see session.signal
	inR, inW, err := os.Pipe()
	if err != nil {
		return fail(CodeAgentFail, err.Error())
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return fail(CodeAgentFail, err.Error())
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return fail(CodeAgentFail, err.Error())
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	startErr := cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if startErr != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return fail(CodeNotFound, startErr.Error())
	}
	s.cmd = cmd

	go func() { // stdin feeder; a command that ignores stdin must not block the port
		for b := range s.stdin {
			if _, err := inW.Write(b); err != nil {
				break
			}
		}
		inW.Close()
		for range s.stdin {
		}
	}()
	var pumps sync.WaitGroup
	pump := func(r *os.File, typ byte) {
		defer pumps.Done()
		defer r.Close()
		buf := make([]byte, MaxPayload)
		live := true
		for {
			n, err := r.Read(buf)
			if n > 0 && live && pw.send(epoch, typ, buf[:n]) != nil {
				live = false // keep draining so the command never sees EPIPE
			}
			if err != nil {
				return
			}
		}
	}
	pumps.Add(2)
	go pump(outR, TypeStdout)
	go pump(errR, TypeStderr)

	var timer *time.Timer
	if req.TimeoutMS > 0 {
		timer = time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() {
			s.mu.Lock()
			s.timedOut = true
			s.mu.Unlock()
			s.signal(syscall.SIGKILL)
		})
	}
	grace := srv.Grace
	if grace <= 0 {
		grace = 500 * time.Millisecond
	}
	go func() {
		st, werr := cmd.Process.Wait()
		if timer != nil {
			timer.Stop()
		}
		s.mu.Lock()
		s.finished = true
		timedOut := s.timedOut
		s.mu.Unlock()
		done := make(chan struct{})
		go func() { pumps.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(grace):
		}
		var ex Exit
		switch {
		case werr != nil:
			ex = Exit{Code: CodeAgentFail, Error: werr.Error()}
		default:
			if ws, ok := st.Sys().(syscall.WaitStatus); ok {
				switch {
				case ws.Exited():
					ex.Code = ws.ExitStatus()
				case ws.Signaled():
					ex.Signal = int(ws.Signal())
					ex.Code = 128 + ex.Signal
				}
			}
		}
		if timedOut {
			ex.TimedOut = true
			ex.Code = CodeTimeout
		}
		b, _ := json.Marshal(ex)
		_ = pw.send(epoch, TypeExit, b)
	}()
	return s
}
