package netcfg

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetNS is a network namespace held open by a file descriptor. Named
// namespaces are also bind-mounted at /run/netns/NAME, where `ip netns`
// finds them; anonymous ones disappear when the last descriptor or socket
// referring to them is gone.
type NetNS struct {
	name string // "" for an anonymous namespace

	mu     sync.Mutex // protects h and closed
	h      netns.NsHandle
	closed bool
}

// NetNSDir is where named namespaces are bind-mounted (iproute2's
// NETNS_RUN_DIR).
const NetNSDir = "/run/netns"

// ErrNetNSClosed is returned by Do on a closed namespace.
var ErrNetNSClosed = errors.New("netcfg: network namespace closed")

// NewNetNS creates a network namespace with its loopback interface up.
// With a name it is bind-mounted at /run/netns/NAME (like `ip netns add
// NAME`, which it fails like when the name exists); with "" it is
// anonymous. Needs CAP_SYS_ADMIN.
func NewNetNS(name string) (*NetNS, error) {
	if name != "" && (name == "." || name == ".." || filepath.Base(name) != name) {
		return nil, fmt.Errorf("netcfg: invalid namespace name %q", name)
	}
	var (
		h   netns.NsHandle
		err error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Unshare moves this thread into the new namespace; it is never
		// unlocked, so the runtime discards the thread with the goroutine.
		runtime.LockOSThread()
		if name == "" {
			h, err = netns.New()
		} else {
			h, err = netns.NewNamed(name)
		}
		if err != nil {
			return
		}
		if err = setUp("lo"); err != nil {
			h.Close()
			if name != "" {
				netns.DeleteNamed(name)
			}
		}
	}()
	<-done
	if err != nil {
		if name != "" && errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("netcfg: creating network namespace %q: it already exists", name)
		}
		return nil, fmt.Errorf("netcfg: creating network namespace %q: %w", name, permErr(err))
	}
	return &NetNS{name: name, h: h}, nil
}

// OpenNetNS opens the named namespace /run/netns/NAME.
func OpenNetNS(name string) (*NetNS, error) {
	h, err := netns.GetFromName(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("netcfg: network namespace %q does not exist", name)
		}
		return nil, fmt.Errorf("netcfg: opening network namespace %q: %w", name, permErr(err))
	}
	return &NetNS{name: name, h: h}, nil
}

// Name is the namespace's name, "" for an anonymous one.
func (n *NetNS) Name() string {
	if n == nil {
		return ""
	}
	return n.name
}

// String names the namespace for messages.
func (n *NetNS) String() string {
	switch {
	case n == nil:
		return "current namespace"
	case n.name == "":
		return "anonymous namespace"
	}
	return "namespace " + n.name
}

// Do runs f on a locked OS thread inside the namespace and returns f's
// error. A nil receiver runs f on the calling goroutine. f must not start
// goroutines that expect to be in the namespace (they are not); sockets
// and netlink requests f makes itself are. A panic in f is re-raised in
// the caller.
func (n *NetNS) Do(f func() error) error {
	if n == nil {
		return f()
	}
	// Enter through a duplicate of the descriptor, so no lock is held
	// while f runs (f may call Do again, on this namespace or another)
	// and Close cannot pull the descriptor out from under the setns.
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrNetNSClosed
	}
	fd, derr := unix.FcntlInt(uintptr(n.h), unix.F_DUPFD_CLOEXEC, 0)
	n.mu.Unlock()
	if derr != nil {
		return fmt.Errorf("netcfg: entering %s: %w", n, derr)
	}
	h := netns.NsHandle(fd)
	defer h.Close()

	var (
		err      error
		panicked any
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, gerr := netns.Get()
		if gerr != nil {
			err = fmt.Errorf("netcfg: reading the current namespace: %w", gerr)
			return // thread stays locked and is discarded
		}
		defer orig.Close()
		if serr := netns.Set(h); serr != nil {
			err = fmt.Errorf("netcfg: entering %s: %w", n, permErr(serr))
			runtime.UnlockOSThread() // setns failed: still in the original namespace
			return
		}
		func() {
			defer func() { panicked = recover() }()
			err = f()
		}()
		if rerr := netns.Set(orig); rerr != nil {
			// Leave the thread locked: it dies with this goroutine rather
			// than running other goroutines inside the namespace.
			if err == nil {
				err = fmt.Errorf("netcfg: leaving %s: %w", n, rerr)
			}
			return
		}
		runtime.UnlockOSThread()
	}()
	<-done
	if panicked != nil {
		panic(panicked)
	}
	return err
}

// Path is a path that opens the namespace (for nsenter or `ip netns exec`
// style tools): /run/netns/NAME for named ones, this process's descriptor
// under /proc for anonymous ones. It is "" after Close.
func (n *NetNS) Path() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return ""
	case n.name != "":
		return filepath.Join(NetNSDir, n.name)
	}
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(n.h))
}

// FD is the namespace's descriptor (valid until Close).
func (n *NetNS) FD() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return int(n.h)
}

// Close releases the descriptor. An anonymous namespace, and every
// interface in it, goes away once no socket or process uses it; a named one
// stays until Delete. Close is idempotent.
func (n *NetNS) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	return n.h.Close()
}

// Delete closes the namespace and, for a named one, removes
// /run/netns/NAME, as `ip netns delete` does.
func (n *NetNS) Delete() error {
	err := n.Close()
	if n.name != "" {
		if derr := DeleteNamedNetNS(n.name); derr != nil {
			return derr
		}
	}
	return err
}

// DeleteNamedNetNS removes /run/netns/NAME (`ip netns delete NAME`).
func DeleteNamedNetNS(name string) error {
	if err := netns.DeleteNamed(name); err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, errEINVAL) {
			return fmt.Errorf("netcfg: network namespace %q does not exist", name)
		}
		return fmt.Errorf("netcfg: deleting network namespace %q: %w", name, permErr(err))
	}
	return nil
}
