package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link/udp"
	"github.com/goroce/goroce/hca/netcfg"
)

// privateNetNSEnv marks a command that privateLoopback re-ran in a private
// network namespace, so that it brings its loopback up and does not re-run
// itself again.
const privateNetNSEnv = "GOROCE_PRIVATE_NETNS"

// privateLoopback lets the commands that only talk to themselves on
// loopback (goroce demo, goroce bench --loopback) run where the host's
// loopback cannot carry them:
//
//   - without CAP_NET_RAW (an ordinary user), the udp link cannot open the
//     raw socket through which it reads IPv4 with its real header, the
//     header every ICRC covers;
//   - another program already holds UDP port 4791 on one of the addresses.
//
// In either case it runs the same command line again in a private network
// namespace, with its own loopback and port 4791, and, for an ordinary
// user, in a user namespace that maps the user to root inside (as
// `unshare -r -n` does; the files it writes are still the user's). Nothing
// leaves the namespace: both devices and all their traffic are inside it.
//
// Where no namespace can be created and only the raw socket was missing,
// the command goes on here: the udp link then receives on its UDP socket
// (openUDPFallback), with the weaker ICRC check it announces.
//
// The same holds where the namespaces can be created but the re-run cannot
// bring its loopback up: where a user namespace grants no capabilities
// (Ubuntu's apparmor_restrict_unprivileged_userns, or CAP_NET_ADMIN not in
// the bounding set), the re-run exits with exitPrivateNSUnusable.
//
// It returns done false when the command should go on in this process
// (nothing stands in the way, this process is already the re-run one,
// whose loopback it has brought up, or the fallback above), and otherwise
// the re-run's exit status. Only a process that main owns re-runs itself
// (ownProcess): a test calling run in-process goes on, and meets the usual
// errors.
func privateLoopback(cmd string, addrs []netip.Addr, stderr io.Writer) (code int, done bool) {
	if os.Getenv(privateNetNSEnv) == "1" {
		if err := netcfg.SetUp(nil, "lo"); err != nil {
			fmt.Fprintf(stderr, "%s: bringing up the private namespace's loopback: %v\n", cmd, err)
			return exitPrivateNSUnusable, true
		}
		return 0, false
	}
	if !ownProcess {
		return 0, false
	}
	why := loopbackBlocked(addrs)
	if why == "" {
		return 0, false
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s, and this program cannot find itself to run again in a private network namespace: %v\n", cmd, why, err)
		return exitFail, true
	}
	attrs := []*syscall.SysProcAttr{{Cloneflags: unix.CLONE_NEWNET}}
	if os.Geteuid() != 0 {
		attrs = nil
	}
	uid, gid := os.Getuid(), os.Getgid()
	attrs = append(attrs, &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
	})
	var startErr error
	for _, a := range attrs {
		c := exec.Command(self, os.Args[1:]...)
		c.Env = append(os.Environ(), privateNetNSEnv+"=1")
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		c.SysProcAttr = a
		if startErr = c.Start(); startErr != nil {
			continue
		}
		how := "a private network namespace"
		if a.Cloneflags&unix.CLONE_NEWUSER != 0 {
			how = "private user and network namespaces (you are root only inside them)"
		}
		fmt.Fprintf(stderr, "%s: %s: running again in %s, on its own loopback\n", cmd, why, how)
		return afterRerun(cmd, why, waitForwarding(c), stderr)
	}
	if why == whyNoRaw {
		// The udp link can do without the raw socket (udp.Config.PlainIPv4),
		// and says so when it opens.
		fmt.Fprintf(stderr, "%s: %s, and no private network namespace can be created here (%v%s): going on without the raw socket\n", cmd, why, startErr, nsLimitHint(startErr))
		return 0, false
	}
	fmt.Fprintf(stderr, "%s: %s, and a private network namespace to run in cannot be created here: %v%s "+
		"(run as root, or allow unprivileged user namespaces: sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone)\n",
		cmd, why, startErr, nsLimitHint(startErr))
	return exitFail, true
}

// afterRerun turns the status of a re-run into privateLoopback's result:
// its own status, unless it could not use its namespace; then, where only
// the raw socket was missing, the command goes on here without it.
func afterRerun(cmd, why string, code int, stderr io.Writer) (int, bool) {
	switch {
	case code != exitPrivateNSUnusable:
		return code, true
	case why == whyNoRaw:
		fmt.Fprintf(stderr, "%s: the private namespace is of no use here: going on without the raw socket\n", cmd)
		return 0, false
	}
	return exitFail, true
}

// exitPrivateNSUnusable is the status of a re-run that could not bring its
// private namespace's loopback up.
const exitPrivateNSUnusable = 97

// whyNoRaw is loopbackBlocked's reason when the raw socket is refused.
const whyNoRaw = "no CAP_NET_RAW for the raw socket through which the udp link reads IPv4 with its real header (every ICRC covers it)"

// loopbackBlocked says why the udp link's endpoints on addrs cannot open
// on this host's loopback, or "" when they can (as far as a probe can
// tell: the endpoints themselves report anything else).
func loopbackBlocked(addrs []netip.Addr) string {
	for _, a := range addrs {
		if !a.Is4() {
			continue
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		if err != nil {
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
				return whyNoRaw
			}
			break
		}
		unix.Close(fd)
		break
	}
	for _, a := range addrs {
		if inUse(a, udp.DefaultPort) {
			return fmt.Sprintf("UDP port %d on %v is in use by another program", udp.DefaultPort, a)
		}
	}
	return ""
}

// inUse reports whether binding a UDP socket to a:port fails because
// another socket holds it.
func inUse(a netip.Addr, port uint16) bool {
	fam := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(port), Addr: a.As4()}
	if a.Is6() {
		fam = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(port), Addr: a.As16()}
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return errors.Is(unix.Bind(fd, sa), unix.EADDRINUSE)
}

// waitForwarding waits for c, passing on SIGINT and SIGTERM (a terminal's
// Ctrl-C reaches both processes anyway; a kill of this PID alone must also
// end the run), and returns its exit status.
func waitForwarding(c *exec.Cmd) int {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	for {
		select {
		case s := <-sig:
			_ = c.Process.Signal(s)
		case err := <-done:
			var ee *exec.ExitError
			switch {
			case err == nil:
				return exitOK
			case errors.As(err, &ee) && ee.ExitCode() >= 0:
				return ee.ExitCode()
			default:
				return exitFail
			}
		}
	}
}

// nsLimitHint explains the errno clone(2) gives when a namespace limit
// (user.max_user_namespaces, user.max_net_namespaces) is reached.
func nsLimitHint(err error) string {
	if errors.Is(err, unix.ENOSPC) {
		return ": a namespace limit is reached, see sysctl user.max_user_namespaces and user.max_net_namespaces"
	}
	return ""
}
