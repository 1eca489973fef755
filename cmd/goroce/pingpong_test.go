package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/hca/link"
	"github.com/goroce/goroce/hca/link/pcap"
	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/wire"
)

// lockedBuffer is an io.Writer a test may read while a command writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cmdRun is a command running in a goroutine.
type cmdRun struct {
	stdout, stderr lockedBuffer
	status         int
	done           chan struct{}
}

func startCmd(args ...string) *cmdRun {
	c := &cmdRun{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.status = run(args, &c.stdout, &c.stderr)
	}()
	return c
}

func (c *cmdRun) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(d):
		t.Fatalf("command still running after %v; stdout:\n%s\nstderr:\n%s", d, c.stdout.String(), c.stderr.String())
	}
}

// waitOutput waits until the command printed s (or ended).
func (c *cmdRun) waitOutput(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(c.stdout.String(), s) {
		select {
		case <-c.done:
			t.Fatalf("command ended (status %d) before printing %q; stderr: %s", c.status, s, c.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in output %q", s, c.stdout.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func freeTCPPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// pingpongPair runs a server on srvAddr and a client on cliAddr with the
// same tool flags and returns both when they have finished.
func pingpongPair(t *testing.T, srvAddr, cliAddr string, srvExtra, cliExtra, flags []string) (srv, cli *cmdRun) {
	t.Helper()
	port := freeTCPPort(t)
	sargs := append([]string{"pingpong", "-p", port, "--addr", srvAddr}, flags...)
	srv = startCmd(append(sargs, srvExtra...)...)
	srv.waitOutput(t, "local address")
	cargs := append([]string{"pingpong", "-p", port, "--addr", cliAddr}, flags...)
	cargs = append(cargs, cliExtra...)
	cargs = append(cargs, "127.0.0.1") // HOST after the flags, then more flags would be fine too
	cli = startCmd(cargs...)
	cli.wait(t, 60*time.Second)
	srv.wait(t, 60*time.Second)
	return srv, cli
}

var (
	ppLocalRE  = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}([,:]) GID (\S+)$`)
	ppRemoteRE = regexp.MustCompile(`^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID (\S+)$`)
	ppBytesRE  = regexp.MustCompile(`^(\d+) bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec$`)
	ppItersRE  = regexp.MustCompile(`^(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`)
)

func checkPingpongOutput(t *testing.T, who string, c *cmdRun, nqp int, ud bool, size, iters int, local, remote string) {
	t.Helper()
	if c.status != exitOK || c.stderr.String() != "" {
		t.Fatalf("%s: status %d, stderr %q", who, c.status, c.stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(c.stdout.String(), "\n"), "\n")
	if len(lines) != 2*nqp+2 {
		t.Fatalf("%s: %d lines, want %d:\n%s", who, len(lines), 2*nqp+2, c.stdout.String())
	}
	sep := ","
	if ud {
		sep = ":"
	}
	for i := range nqp {
		m := ppLocalRE.FindStringSubmatch(lines[i])
		if m == nil || m[1] != sep || m[2] != "::ffff:"+local {
			t.Errorf("%s: local line %q", who, lines[i])
		}
		r := ppRemoteRE.FindStringSubmatch(lines[nqp+i])
		if r == nil || r[1] != "::ffff:"+remote {
			t.Errorf("%s: remote line %q", who, lines[nqp+i])
		}
	}
	b, it := ppBytesRE.FindStringSubmatch(lines[2*nqp]), ppItersRE.FindStringSubmatch(lines[2*nqp+1])
	if b == nil || it == nil || b[1] != strconv.Itoa(size*iters*2) || it[1] != strconv.Itoa(iters) {
		t.Errorf("%s: summary %q", who, lines[2*nqp:])
	}
}

func TestPingpongCLI(t *testing.T) {
	needRawSocket(t)
	const iters = 20
	for _, mode := range []struct {
		name  string
		flags []string
		nqp   int
		ud    bool
	}{
		{"rc", nil, 1, false},
		{"uc", []string{"--qp", "uc"}, 1, false},
		{"ud", []string{"--qp", "ud"}, 1, true},
		{"srq3", []string{"--srq", "3"}, 3, false},
	} {
		for _, size := range []int{1, 1024, 4096, 8192} {
			if mode.ud && size > 4096 {
				continue // -s at most the active MTU (4096 on loopback)
			}
			for _, ev := range []bool{false, true} {
				name := fmt.Sprintf("%s/%d/events=%v", mode.name, size, ev)
				t.Run(name, func(t *testing.T) {
					flags := append([]string{"-n", strconv.Itoa(iters), "-s", strconv.Itoa(size), "-r", "32"}, mode.flags...)
					if ev {
						flags = append(flags, "-e")
					}
					srv, cli := pingpongPair(t, "127.0.77.11", "127.0.77.12", nil, nil, flags)
					checkPingpongOutput(t, "server", srv, mode.nqp, mode.ud, size, iters, "127.0.77.11", "127.0.77.12")
					checkPingpongOutput(t, "client", cli, mode.nqp, mode.ud, size, iters, "127.0.77.12", "127.0.77.11")
				})
			}
		}
	}
}

// opcodeSeq reads the RoCE packets of a capture as "OPCODE/A" strings.
func opcodeSeq(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcap.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var seq []string
	var fr pcap.Frame
	var p wire.Packet
	for {
		if err := r.Next(&fr); err != nil {
			if errors.Is(err, io.EOF) {
				return seq
			}
			t.Fatal(err)
		}
		fm, ok := pcap.FramingFor(fr.Format)
		if !ok || p.Decode(fr.Data, fm) != nil {
			continue
		}
		h := p.BTH()
		a := "-"
		if h.AckReq() {
			a = "A"
		}
		seq = append(seq, fmt.Sprintf("%v/%s", h.Opcode(), a))
	}
}

// TestPingpongWireMatchesRXE runs the commands of rc_pingpong.pcap and
// rc_pingpong_4k.pcap between two goroce devices and compares the opcode
// and AckReq sequence on the client's link with the kernel rxe capture; the
// capture of the run must also verify with no bad packet.
func TestPingpongWireMatchesRXE(t *testing.T) {
	needRawSocket(t)
	for _, tc := range []struct {
		capture, size, iters string
		qp                   []string
	}{
		{"rc_pingpong.pcap", "64", "5", nil},
		{"rc_pingpong_4k.pcap", "4096", "3", nil},
		{"uc_pingpong.pcap", "64", "5", []string{"--qp", "uc"}},
		{"ud_pingpong.pcap", "64", "5", []string{"--qp", "ud"}},
	} {
		t.Run(tc.capture, func(t *testing.T) {
			golden := filepath.Join("../../../shared/captures", tc.capture)
			if _, err := os.Stat(golden); err != nil {
				t.Skipf("golden capture %s not available: %v", golden, err)
			}
			capName := filepath.Join(t.TempDir(), "client.pcap")
			srv, cli := pingpongPair(t, "127.0.77.13", "127.0.77.14", nil, []string{"--pcap", capName},
				append([]string{"-s", tc.size, "-n", tc.iters}, tc.qp...))
			ud := len(tc.qp) > 0 && tc.qp[1] == "ud"
			checkPingpongOutput(t, "server", srv, 1, ud, atoi(t, tc.size), atoi(t, tc.iters), "127.0.77.13", "127.0.77.14")
			checkPingpongOutput(t, "client", cli, 1, ud, atoi(t, tc.size), atoi(t, tc.iters), "127.0.77.14", "127.0.77.13")
			f, err := os.Open(capName)
			if err != nil {
				t.Fatal(err)
			}
			counts, err := pcap.Verify(f, io.Discard, pcap.VerifyOptions{Quiet: true})
			f.Close()
			if err != nil || counts.Bad != 0 || counts.OK == 0 {
				t.Fatalf("pcap.Verify: %v, %v", counts, err)
			}
			got, want := opcodeSeq(t, capName), opcodeSeq(t, golden)
			if len(want) == 0 {
				t.Fatalf("no RoCE packets in %s", golden)
			}
			t.Logf("%d packets: %v", len(got), got)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("opcode sequence differs from kernel rxe:\n got %v\nwant %v", got, want)
			}
		})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPingpongCLIErrors(t *testing.T) {
	lo := loopbackName(t)
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		msg    string
	}{
		{"bad mtu", []string{"-m", "1000"}, exitUsage, "-m 1000: not an IB MTU"},
		{"bad qp", []string{"--qp", "xrc"}, exitUsage, `--qp "xrc"`},
		{"srq with ud", []string{"--qp", "ud", "--srq", "2"}, exitUsage, "--srq needs --qp rc"},
		{"unknown flag", []string{"-Y"}, exitUsage, "flag provided but not defined: -Y"},
		{"rdma-core flag not implemented", []string{"-o"}, exitUsage, "-o (ibv_rc_pingpong's on-demand paging) is not implemented"},
		{"rdma-core long flag not implemented", []string{"--ts"}, exitUsage, "--ts (ibv_rc_pingpong's completion timestamps) is not implemented"},
		{"two hosts", []string{"a", "b"}, exitUsage, "more than one HOST"},
		{"zero size", []string{"-s", "0"}, exitUsage, "-s 0: goroce pingpong sends messages of at least 1 byte"},
		{"zero size long", []string{"--size=0"}, exitUsage, "-s 0"},
		{"bad port", []string{"-p", "70000"}, exitUsage, "-p 70000"},
		{"bad ib port", []string{"-i", "0"}, exitUsage, "-i 0"},
		{"bad sl", []string{"-l", "16"}, exitUsage, "-l 16"},
		{"bad interface", []string{"--dev", "nosuchif0"}, exitFail, `interface "nosuchif0" does not exist`},
		{"address not on interface", []string{"--dev", lo, "--addr", "192.0.2.7"}, exitFail, "address 192.0.2.7 is not assigned to interface " + lo},
		{"address not on host", []string{"--addr", "192.0.2.7"}, exitFail, "address 192.0.2.7 is not assigned to any interface"},
		{"bad encap", []string{"--encap", "roce1"}, exitUsage, "encap roce1 needs an Ethernet link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, errOut := runCLI(append([]string{"pingpong"}, tc.args...)...)
			if st != tc.status || !strings.Contains(errOut, tc.msg) {
				t.Fatalf("status %d, stderr %q; want %d containing %q", st, errOut, tc.status, tc.msg)
			}
			if tc.status == exitFail && strings.Count(errOut, "\n") != 1 {
				t.Fatalf("stderr is not one line: %q", errOut)
			}
		})
	}
}

func TestPingpongBusyPort(t *testing.T) {
	needRawSocket(t)
	addr := netip.MustParseAddr("127.0.77.21")
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, udp.DefaultPort)))
	if err != nil {
		t.Skipf("cannot hold %s:4791: %v", addr, err)
	}
	defer c.Close()
	st, _, errOut := runCLI("pingpong", "--addr", addr.String(), "-p", freeTCPPort(t))
	if st != exitFail || !strings.Contains(errOut, "already in use") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("status %d, stderr %q", st, errOut)
	}
}

func TestPingpongPrivileges(t *testing.T) {
	orig := openUDPLink
	defer func() { openUDPLink = orig }()
	openUDPLink = func(udp.Config) (link.Endpoint, error) {
		return nil, fmt.Errorf("udp: raw IPv4 socket (needs CAP_NET_RAW): %w", syscall.EPERM)
	}
	st, _, errOut := runCLI("pingpong", "--addr", "127.0.77.22")
	if st != exitFail || !strings.Contains(errOut, "permission denied") || !strings.Contains(errOut, "CAP_NET_RAW") {
		t.Fatalf("status %d, stderr %q", st, errOut)
	}
}

// TestPingpongPeerClosesDuringExchange: a client that sends half a record
// and hangs up makes the server fail with one line naming the exchange.
func TestPingpongPeerClosesDuringExchange(t *testing.T) {
	needRawSocket(t)
	port := freeTCPPort(t)
	srv := startCmd("pingpong", "-p", port, "--addr", "127.0.77.23")
	srv.waitOutput(t, "local address")
	c, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("0000:000011:00"))
	c.Close()
	srv.wait(t, 20*time.Second)
	if e := srv.stderr.String(); srv.status != exitFail || !strings.Contains(e, "TCP exchange") || strings.Count(e, "\n") != 1 {
		t.Fatalf("status %d, stderr %q", srv.status, e)
	}
}

func TestPingpongNoServer(t *testing.T) {
	needRawSocket(t)
	st, _, errOut := runCLI("pingpong", "-p", freeTCPPort(t), "--addr", "127.0.77.24", "127.0.0.1")
	if st != exitFail || !strings.Contains(errOut, "couldn't connect to 127.0.0.1") {
		t.Fatalf("status %d, stderr %q", st, errOut)
	}
}

// TestParseInterspersed: flags after HOST, as getopt permits.
func TestParseInterspersed(t *testing.T) {
	var o, e bytes.Buffer
	for _, tc := range []struct {
		args []string
		pos  []string
		n    int
	}{
		{[]string{"-n", "5", "host"}, []string{"host"}, 5},
		{[]string{"host", "-n", "6"}, []string{"host"}, 6},
		{[]string{"-n", "7", "host", "-e", "--", "-x"}, []string{"host", "-x"}, 7},
		{nil, nil, 1000},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		n := fs.Int("n", 1000, "")
		fs.Bool("e", false, "")
		pos, _, ok := parseInterspersed(fs, tc.args, &o, &e)
		if !ok || strings.Join(pos, ",") != strings.Join(tc.pos, ",") || *n != tc.n {
			t.Errorf("%q: pos %q n %d ok %v", tc.args, pos, *n, ok)
		}
	}
}
