package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/netcfg"
)

// asMainEnv makes the test binary behave as the goroce binary (TestMain):
// the tests below need a process that main owns, since only such a process
// re-runs itself in a private namespace.
const asMainEnv = "GOROCE_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// freshNS returns a new network namespace (lo up), closed when the test
// ends; it skips the test unless root.
func freshNS(t *testing.T) *netcfg.NetNS {
	t.Helper()
	netcfg.SkipUnlessRoot(t)
	ns, err := netcfg.NewNetNS("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// goroceBinary copies the test binary to a directory every user may read,
// for a run as another user (go test's own build directory is private).
func goroceBinary(t *testing.T) (bin, dir string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its parent directory is private to root.
	dir, err = os.MkdirTemp("", "goroce-privns-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin = filepath.Join(dir, "goroce")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

// The README's first command as an ordinary user: without CAP_NET_RAW the
// udp link cannot open its raw IPv4 socket, so goroce demo runs itself
// again in private user and network namespaces, where it has one, and
// everything works there: every operation verified, the capture written
// as the user's own file and verified.
func TestDemoUnprivileged(t *testing.T) {
	netcfg.SkipUnlessRoot(t) // to run the demo as another user
	bin, dir := goroceBinary(t)
	const nobody = 65534
	file := filepath.Join(dir, "demo.pcap")
	c := exec.Command(bin, "demo", "--pcap", file, "-D", "300ms", "-n", "200")
	c.Dir = dir
	c.Env = append(os.Environ(), asMainEnv+"=1")
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	var out, errs bytes.Buffer
	c.Stdout, c.Stderr = &out, &errs
	err := c.Run()
	if strings.Contains(errs.String(), "namespace can be created here") || strings.Contains(errs.String(), "cannot be created here") {
		// The demo then goes on without the raw socket, the path
		// TestDemoNoNamespaces checks.
		t.Skipf("this kernel lets no ordinary user create a user namespace: %s", strings.TrimSpace(errs.String()))
	}
	if err != nil {
		t.Fatalf("goroce demo as uid %d: %v\nstdout:\n%s\nstderr:\n%s", nobody, err, out.String(), errs.String())
	}
	if !strings.Contains(errs.String(), "no CAP_NET_RAW") || !strings.Contains(errs.String(), "private user and network namespaces") {
		t.Errorf("stderr does not say why and where the demo ran again:\n%s", errs.String())
	}
	for _, op := range []string{"SEND 4096 B", "RDMA_WRITE 65536 B", "RDMA_READ 65536 B", "ATOMIC_CMP_AND_SWP"} {
		if !strings.Contains(out.String(), "ok    "+op) {
			t.Errorf("demo output lacks a verified %s:\n%s", op, out.String())
		}
	}
	if !strings.Contains(out.String(), " 0 bad, 0 other") {
		t.Fatalf("demo output:\n%s", out.String())
	}
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != nobody {
		t.Errorf("the capture belongs to uid %d, want the user's own %d", st.Uid, nobody)
	}
	if st, vout, _ := runCLI("pcap", "verify", "-q", file); st != exitOK || !strings.HasSuffix(strings.TrimSpace(vout), "0 bad, 0 other") {
		t.Fatalf("goroce pcap verify: exit %d\n%s", st, lastLine(vout))
	}
}

// When another program holds UDP port 4791 on 127.0.0.1, goroce bench
// --loopback runs itself again in a private network namespace instead of
// failing to bind (the README used to ask for `unshare -n` by hand).
func TestBenchLoopbackPortInUse(t *testing.T) {
	ns := freshNS(t)
	bin, _ := goroceBinary(t)
	var out, errs bytes.Buffer
	var runErr error
	if err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: 4791, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			return err
		}
		// Started on this thread, the child is born in ns.
		c := exec.Command(bin, "bench", "send_lat", "--loopback", "-n", "300")
		c.Env = append(os.Environ(), asMainEnv+"=1")
		c.Stdout, c.Stderr = &out, &errs
		runErr = c.Run()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatalf("goroce bench send_lat --loopback: %v\nstdout:\n%s\nstderr:\n%s", runErr, out.String(), errs.String())
	}
	if !strings.Contains(errs.String(), "UDP port 4791 on 127.0.0.1 is in use") || !strings.Contains(errs.String(), "private network namespace") {
		t.Errorf("stderr does not say why and where the run went:\n%s", errs.String())
	}
	if !strings.Contains(out.String(), "t_typical[usec]") {
		t.Errorf("no latency table:\n%s", out.String())
	}
}

// goroce pingpong as an ordinary user: without CAP_NET_RAW the udp link
// receives IPv4 on its UDP socket and finds each packet's IP ID from its
// ICRC (udp.Config.PlainIPv4). Server and client run as uid 65534 in a
// fresh namespace and exchange 4 KiB messages (SEND FIRST/MIDDLE/LAST at
// path MTU 1024, GSO runs on the wire), saying once each how they opened
// the link.
func TestPingpongUnprivileged(t *testing.T) {
	ns := freshNS(t) // root: to run as another user in a fresh namespace
	bin, _ := goroceBinary(t)
	port := freeTCPPort(t)
	const nobody = 65534
	cmd := func(args ...string) (*exec.Cmd, *lockedBuffer, *lockedBuffer) {
		c := exec.Command(bin, args...)
		c.Env = append(os.Environ(), asMainEnv+"=1")
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
		var o, e lockedBuffer
		c.Stdout, c.Stderr = &o, &e
		return c, &o, &e
	}
	srv, sout, serr := cmd("pingpong", "-p", port, "--addr", "127.0.0.1", "-s", "4096", "-m", "1024", "-n", "200")
	cli, cout, cerr := cmd("pingpong", "-p", port, "--addr", "127.0.0.2", "-s", "4096", "-m", "1024", "-n", "200", "127.0.0.1")
	var srvErr, cliErr error
	if err := ns.Do(func() error {
		if err := srv.Start(); err != nil {
			return err
		}
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(sout.String(), "local address") && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		cliErr = cli.Run()
		srvErr = srv.Wait()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		who       string
		err       error
		out, errs *lockedBuffer
	}{{"server", srvErr, sout, serr}, {"client", cliErr, cout, cerr}} {
		if r.err != nil {
			t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", r.who, r.err, r.out.String(), r.errs.String())
		}
		if n := strings.Count(r.errs.String(), "no CAP_NET_RAW"); n != 1 || strings.Count(r.errs.String(), "\n") != 1 {
			t.Errorf("%s: stderr should be the one notice of the unprivileged link:\n%s", r.who, r.errs.String())
		}
		if !strings.Contains(r.out.String(), "1638400 bytes in") || !strings.Contains(r.out.String(), "200 iters in") {
			t.Errorf("%s: output:\n%s", r.who, r.out.String())
		}
	}
}

// Where no namespace can be created (here: the namespace limits of the
// user namespace the demo runs in are 0), an ordinary user's demo goes on
// in its own namespace with the udp link receiving on its UDP socket, and
// says so; every check still passes.
func TestDemoNoNamespaces(t *testing.T) {
	ns := freshNS(t) // root: to create the namespaces the demo runs in
	bin, dir := goroceBinary(t)
	file := filepath.Join(dir, "demo.pcap")
	// In a user namespace of its own the demo is root, but not over the
	// network namespace, which init's user namespace owns: no raw socket.
	c := exec.Command("sh", "-c", "echo 0 > /proc/sys/user/max_net_namespaces && echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"",
		bin, "demo", "--pcap", file, "-D", "300ms", "-n", "200")
	c.Dir = dir
	c.Env = append(os.Environ(), asMainEnv+"=1")
	c.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER,
		// Root mapped to root, so that it may lower its namespace's
		// limits (they belong to root); its capabilities still hold in
		// its own user namespace only.
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	}
	var out, errs bytes.Buffer
	c.Stdout, c.Stderr = &out, &errs
	var runErr error
	if err := ns.Do(func() error {
		runErr = c.Run()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if runErr != nil && strings.Contains(errs.String(), "/proc/sys/user/") {
		t.Skipf("cannot lower the namespace limits in a user namespace here: %s", strings.TrimSpace(errs.String()))
	}
	if runErr != nil {
		t.Fatalf("goroce demo: %v\nstdout:\n%s\nstderr:\n%s", runErr, out.String(), errs.String())
	}
	for _, s := range []string{"no private network namespace can be created here", "a namespace limit is reached",
		"going on without the raw socket", "udp link on 127.0.0.1: no CAP_NET_RAW", "udp link on 127.0.0.2: no CAP_NET_RAW"} {
		if !strings.Contains(errs.String(), s) {
			t.Errorf("stderr lacks %q:\n%s", s, errs.String())
		}
	}
	if !strings.Contains(out.String(), "ok    RDMA_READ 65536 B") || !strings.Contains(out.String(), " 0 bad, 0 other") {
		t.Fatalf("demo output:\n%s", out.String())
	}
}

// A re-run that could not bring its namespace's loopback up (a user
// namespace without capabilities, as Ubuntu's
// apparmor_restrict_unprivileged_userns makes them) sends the command on
// here without the raw socket when that was all it lacked, and fails it
// otherwise; any other status is the command's.
func TestAfterRerun(t *testing.T) {
	for _, tc := range []struct {
		why      string
		code     int
		wantCode int
		wantDone bool
		stderr   string
	}{
		{whyNoRaw, exitOK, exitOK, true, ""},
		{whyNoRaw, exitFail, exitFail, true, ""},
		{whyNoRaw, exitPrivateNSUnusable, 0, false, "going on without the raw socket"},
		{"UDP port 4791 on 127.0.0.1 is in use by another program", exitPrivateNSUnusable, exitFail, true, ""},
		{"UDP port 4791 on 127.0.0.1 is in use by another program", exitUsage, exitUsage, true, ""},
	} {
		var errs bytes.Buffer
		code, done := afterRerun("goroce demo", tc.why, tc.code, &errs)
		if code != tc.wantCode || done != tc.wantDone || !strings.Contains(errs.String(), tc.stderr) {
			t.Errorf("afterRerun(%q, %d) = %d, %v, stderr %q; want %d, %v, %q", tc.why, tc.code, code, done, errs.String(), tc.wantCode, tc.wantDone, tc.stderr)
		}
	}
}
