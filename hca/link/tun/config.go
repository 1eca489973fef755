//go:build linux

package tun

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/goroce/goroce/hca/netcfg"
)

// configure sets the MTU, the kernel's address, the routes towards the
// goroce host, and brings the device up, all in the calling thread's
// namespace (netcfg with a nil NetNS), where water created it.
func configure(name string, cfg *Config, mac net.HardwareAddr) error {
	if err := netcfg.SetMTU(nil, name, cfg.MTU); err != nil {
		return fmt.Errorf("tun: %w", err)
	}
	if cfg.KernelAddr.IsValid() {
		if err := netcfg.AddAddr(nil, name, cfg.KernelAddr); err != nil {
			return fmt.Errorf("tun: %w", err)
		}
	}
	if err := netcfg.SetUp(nil, name); err != nil {
		return fmt.Errorf("tun: %w", err)
	}
	if cfg.Mode == TAP && cfg.KernelAddr.IsValid() {
		// The kernel reaches the goroce host by ARP/NDP on the TAP, which
		// goroce does not answer: tell it the host's MAC.
		if err := netcfg.AddNeighbour(nil, name, cfg.Addr.Addr(), mac); err != nil {
			return fmt.Errorf("tun: %w", err)
		}
	}
	if cfg.Mode == TUN {
		// The goroce host's subnet is on the device. A TUN has no
		// neighbours, so an on-link route is all the kernel needs to send
		// the host's packets into it. The kernel address's connected route
		// covers it when both share a prefix.
		on := cfg.Addr.Masked()
		if !cfg.KernelAddr.IsValid() || cfg.KernelAddr.Masked() != on {
			if err := netcfg.AddRoute(nil, on, netip.Addr{}, name); err != nil {
				return fmt.Errorf("tun: %w", err)
			}
		}
	}
	for _, r := range cfg.Routes {
		if err := netcfg.AddRoute(nil, r, netip.Addr{}, name); err != nil {
			return fmt.Errorf("tun: %w", err)
		}
	}
	return nil
}
