// Command goroce-interop-agent is the interop VM's command agent. The same static binary
// (CGO_ENABLED=0, standard library only) runs on both sides of the VM's virtio-serial ports:
//
//	guest:  goroce-interop-agent serve
//	        started (and respawned) by the guest's init; serves every virtio-serial port
//	        named goroce.agent.N
//	host:   goroce-interop-agent exec -d RUNDIR [-t SECS] [-i] [-e K=V]... [-C DIR] [--] CMD...
//	        goroce-interop-agent wait -d RUNDIR [-t SECS]
//
// exec runs CMD (words joined by spaces, like ssh) with /bin/sh -c in the guest, streams its
// stdout and stderr, and exits with the remote status: 124 when the timeout killed it,
// 128+N when signal N did, 255 when the agent could not be reached. With -i the local stdin
// is forwarded. SIGINT/SIGTERM drop the connection, which makes the guest kill the command.
// See package agentproto for the protocol.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/interop/agentproto"
)

const portPrefix = "goroce.agent."

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "serve":
		serve()
	case "exec":
		os.Exit(clientExec(os.Args[2:]))
	case "wait":
		os.Exit(clientWait(os.Args[2:]))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage:\n  %[1]s serve\n  %[1]s exec -d RUNDIR [-t SECS] [-i] [-e K=V]... [-C DIR] [--] CMD...\n  %[1]s wait -d RUNDIR [-t SECS]\n", filepath.Base(os.Args[0]))
	os.Exit(2)
}

// serve watches /sys/class/virtio-ports for agent ports and serves each one forever.
func serve() {
	// rxe pins the memory of every MR; the guest is a throw-away lab VM, so no memlock limit.
	const rlimitMemlock = 8
	_ = syscall.Setrlimit(rlimitMemlock, &syscall.Rlimit{Cur: ^uint64(0), Max: ^uint64(0)})
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP)
	srv := &agentproto.Server{
		BaseEnv: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME=/root", "TERM=dumb", "LANG=C.UTF-8", "USER=root", "LOGNAME=root"},
		Dir: "/root",
	}
	conn := newConnectSignal()
	served := map[string]bool{}
	for {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, err := os.ReadFile(n)
			name := strings.TrimSpace(string(b))
			if err != nil || !strings.HasPrefix(name, portPrefix) || served[name] {
				continue
			}
			served[name] = true
			dev := "/dev/" + filepath.Base(filepath.Dir(n))
			fmt.Fprintf(os.Stderr, "goroce-interop-agent: serving %s on %s\n", name, dev)
			go servePort(srv, dev, conn)
		}
		time.Sleep(time.Second)
	}
}

func servePort(srv *agentproto.Server, dev string, conn *connectSignal) {
	for {
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "goroce-interop-agent: %v\n", err)
			time.Sleep(time.Second)
			continue
		}
		conn.watch(f)
		// The port reads EOF while no host client is connected. The kernel
		// signals SIGIO when one connects (virtio_console, O_ASYNC): wait for
		// that, or a second at most, instead of polling every 50 ms, which
		// cost the agent 14 % of a TCG vCPU (/proc/PID/stat during one
		// exec) under every benchmark.
		for {
			next := conn.next()
			err := srv.Serve(f)
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				fmt.Fprintf(os.Stderr, "goroce-interop-agent: %s: %v\n", dev, err)
				break
			}
			select {
			case <-next:
			case <-time.After(time.Second):
			}
		}
		f.Close()
		time.Sleep(200 * time.Millisecond)
	}
}

// connectSignal turns the SIGIO a virtio-serial port raises when its host
// side connects or disconnects into a broadcast: next returns a channel
// closed at the next SIGIO after the call.
type connectSignal struct {
	mu  sync.Mutex
	gen chan struct{}
}

func newConnectSignal() *connectSignal {
	c := &connectSignal{gen: make(chan struct{})}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGIO)
	go func() {
		for range sig {
			c.mu.Lock()
			close(c.gen)
			c.gen = make(chan struct{})
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *connectSignal) next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// watch asks the kernel to signal this process on f's connection changes
// (F_SETOWN, O_ASYNC). Without it the port is still served, found by the
// one-second retry.
func (c *connectSignal) watch(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETOWN, uintptr(os.Getpid())); e != 0 {
			fmt.Fprintf(os.Stderr, "goroce-interop-agent: F_SETOWN: %v\n", e)
			return
		}
		fl, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		if e == 0 {
			_, _, e = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFL, fl|syscall.O_ASYNC)
		}
		if e != 0 {
			fmt.Fprintf(os.Stderr, "goroce-interop-agent: O_ASYNC: %v\n", e)
		}
	})
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func clientExec(args []string) int {
	fs := flag.NewFlagSet("exec", flag.ExitOnError)
	runDir := fs.String("d", os.Getenv("GOROCE_INTEROP_RUNDIR"), "VM run directory (holds agent.N.sock)")
	tmo := fs.Float64("t", 0, "timeout in seconds, 0 = none (the remote command is killed, exit 124)")
	fwd := fs.Bool("i", false, "forward stdin to the remote command")
	dir := fs.String("C", "", "remote working directory (default /root)")
	wait := fs.Float64("w", 30, "seconds to wait for a free agent port")
	var env multiFlag
	fs.Var(&env, "e", "KEY=VALUE for the remote command (repeatable)")
	_ = fs.Parse(args)
	if fs.NArg() == 0 || *runDir == "" {
		usage()
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer cancel()
	if *tmo > 0 { // host-side safety net should the guest be wedged
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, time.Duration((*tmo+15)*float64(time.Second)))
		defer c2()
	}
	c := &agentproto.Client{RunDir: *runDir, PortWait: time.Duration(*wait * float64(time.Second))}
	req := agentproto.Request{Script: strings.Join(fs.Args(), " "), Env: env, Dir: *dir,
		TimeoutMS: int64(*tmo * 1000)}
	var in *os.File
	if *fwd {
		in = os.Stdin
	}
	var ex agentproto.Exit
	var err error
	if in != nil {
		ex, err = c.Run(ctx, req, in, os.Stdout, os.Stderr)
	} else {
		ex, err = c.Run(ctx, req, nil, os.Stdout, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goroce-interop-agent:", err)
		if ctx.Err() == context.DeadlineExceeded {
			return agentproto.CodeTimeout
		}
		return agentproto.CodeAgentFail
	}
	if ex.Error != "" {
		fmt.Fprintln(os.Stderr, "goroce-interop-agent:", ex.Error)
	}
	if ex.TimedOut {
		fmt.Fprintln(os.Stderr, "goroce-interop-agent: remote command timed out")
	}
	return ex.Code
}

func clientWait(args []string) int {
	fs := flag.NewFlagSet("wait", flag.ExitOnError)
	runDir := fs.String("d", os.Getenv("GOROCE_INTEROP_RUNDIR"), "VM run directory")
	tmo := fs.Float64("t", 120, "seconds to wait for the guest agent")
	_ = fs.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*tmo*float64(time.Second)))
	defer cancel()
	if err := (&agentproto.Client{RunDir: *runDir}).Wait(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "goroce-interop-agent:", err)
		return 1
	}
	return 0
}
