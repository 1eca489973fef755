//go:build linux

package tun

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link/internal/vnet"
)

// offloadAttempts are the TUNSETOFFLOAD arguments Open tries in turn: the
// kernel refuses flags it does not know with EINVAL (TUN_F_USO4/USO6
// arrived in Linux 6.2 and only come as a pair), so each step drops what
// the previous one may have failed on. 0 (no offload) always succeeds.
var offloadAttempts = []int{
	unix.TUN_F_CSUM | unix.TUN_F_USO4 | unix.TUN_F_USO6,
	unix.TUN_F_CSUM,
	0,
}

// Test hooks: how Open asks the kernel for the supported flags and the
// offloads. Tests replace them to play a kernel that refuses.
var (
	getFeatures = func(fd int) (uint32, error) { return unix.IoctlGetUint32(fd, unix.TUNGETFEATURES) }
	setOffload  = func(fd int, flags int) error { return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, flags) }
)

// openDevice opens /dev/net/tun (non-blocking, close-on-exec) and creates
// or attaches to the device name (TUNSETIFF; "" lets the kernel choose).
// With offload it asks for IFF_VNET_HDR when the kernel supports it, sets
// the header size and negotiates TUNSETOFFLOAD; a refusal only narrows
// what is returned in Offloads.
func openDevice(name string, mode Mode, offload bool) (fd int, ifname string, off Offloads, err error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return -1, "", off, err
	}
	fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", off, err
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if mode == TAP {
		flags = unix.IFF_TAP | unix.IFF_NO_PI
	}
	if offload {
		if feat, ferr := getFeatures(fd); ferr == nil && feat&unix.IFF_VNET_HDR != 0 {
			flags |= unix.IFF_VNET_HDR
			off.VnetHdr = true
		}
	}
	ifr.SetUint16(flags)
	if err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return -1, "", off, fmt.Errorf("TUNSETIFF: %w", err)
	}
	ifname = ifr.Name()
	if !off.VnetHdr {
		// Offloads are per device and outlive an fd: an attached device
		// may have been left with USO on, and a reader without the header
		// would get super-packets it cannot tell apart. Best effort.
		_ = setOffload(fd, 0)
		return fd, ifname, off, nil
	}
	// 10 is the default after TUNSETIFF; say it anyway, so a device an
	// earlier owner set otherwise (it is per device) reads as expected.
	if err = unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, vnet.HdrLen); err != nil {
		return -1, "", off, fmt.Errorf("TUNSETVNETHDRSZ: %w", err)
	}
	for _, a := range offloadAttempts {
		if setOffload(fd, a) == nil {
			off.Csum = a&unix.TUN_F_CSUM != 0
			off.USO4 = a&unix.TUN_F_USO4 != 0
			off.USO6 = a&unix.TUN_F_USO6 != 0
			return fd, ifname, off, nil
		}
	}
	// Not even "no offload": keep the header, ask for nothing more (the
	// device's offload state is then whatever it was, and Read handles
	// any header it gets).
	return fd, ifname, off, nil
}
