package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/goroce/goroce/hca/netcfg"
)

// goroce lab up|down: two named network namespaces joined by a veth pair,
// for trying goroce between two "hosts" on one machine.

func init() {
	register(&command{name: "lab", summary: "create or remove a two-namespace veth lab (root)", run: runLab})
}

// labSynopsis is one usage line per action (usageFunc aligns them).
var labSynopsis = []string{"goroce lab up [--name PREFIX] [--mtu N] [--loss PCT]", "goroce lab down [--name PREFIX]"}

// labHost is one side of the lab.
type labHost struct {
	ns, ifname string
	v4, v6     netip.Prefix
}

func labHosts(prefix string) [2]labHost {
	return [2]labHost{
		{prefix + "-a", "veth-a", netcfg.HostAPrefix, netcfg.HostAAddr6},
		{prefix + "-b", "veth-b", netcfg.HostBPrefix, netcfg.HostBAddr6},
	}
}

// labMarker is the interface alias `lab up` puts on both veth ends; `lab
// down` deletes only namespaces whose veth carries it.
func labMarker(prefix string) string { return "goroce lab " + prefix }

// validLabName reports whether name is 1 to 30 letters, digits, '.', '_'
// and '-', not starting with '-' (it prefixes namespace and link names).
// A loop, not a regexp: compiling `{0,29}` at package init cost every
// goroce command ~0.55 M instructions before main, 6 % of `goroce help`
// (callgrind: 8.89 M against 8.33 M).
func validLabName(name string) bool {
	if len(name) == 0 || len(name) > 30 || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func runLab(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goroce lab", flag.ContinueOnError)
	name := fs.String("name", "goroce", "namespace name `PREFIX`: namespaces PREFIX-a and PREFIX-b")
	mtu := fs.Int("mtu", 1500, "MTU of the veth pair in `BYTES` (up)")
	loss := fs.Int("loss", 0, "drop `PCT` percent of RoCE frames in each direction with nftables (up)")
	fs.Usage = func() {
		usageFunc(fs, labSynopsis...)()
		w := fs.Output()
		fmt.Fprintln(w, "\nup creates namespaces PREFIX-a and PREFIX-b joined by a veth pair (veth-a, veth-b)")
		fmt.Fprintln(w, "with 10.99.0.1/24, fd99::1/64 and 10.99.0.2/24, fd99::2/64, and prints how to run")
		fmt.Fprintln(w, "goroce in each. down removes what up made, and nothing else. Both need root.")
	}
	// Flags may come before the action too (lab --name x up): the
	// action is the first argument that is not a flag.
	pos, status, ok := parseInterspersed(fs, args, stdout, stderr)
	if !ok {
		return status
	}
	if len(pos) == 0 {
		fmt.Fprintln(stderr, "goroce lab: want up or down")
		fs.SetOutput(stderr)
		fs.Usage()
		return exitUsage
	}
	verb := pos[0]
	if len(pos) > 1 {
		fmt.Fprintf(stderr, "goroce lab: unexpected argument %q\n", pos[1])
		return exitUsage
	}
	if !validLabName(*name) {
		fmt.Fprintf(stderr, "goroce lab: invalid --name %q (letters, digits, '.', '_', '-'; at most 30)\n", *name)
		return exitUsage
	}
	switch verb {
	case "up":
		if *mtu < 68 || *mtu > 65535 {
			fmt.Fprintf(stderr, "goroce lab: --mtu %d out of range (68..65535)\n", *mtu)
			return exitUsage
		}
		if *loss < 0 || *loss > 100 {
			fmt.Fprintf(stderr, "goroce lab: --loss %d out of range (0..100)\n", *loss)
			return exitUsage
		}
		if err := labUp(*name, *mtu, *loss, stdout); err != nil {
			fmt.Fprintf(stderr, "goroce lab up: %v\n", err)
			return exitFail
		}
	case "down":
		// down removes what up made, whatever its MTU and loss: one of
		// these on down is a mistake, not a setting.
		var upOnly string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "mtu" || f.Name == "loss" {
				upOnly = f.Name
			}
		})
		if upOnly != "" {
			fmt.Fprintf(stderr, "goroce lab down: --%s applies to lab up only\n", upOnly)
			return exitUsage
		}
		if err := labDown(*name, stdout); err != nil {
			fmt.Fprintf(stderr, "goroce lab down: %v\n", err)
			return exitFail
		}
	default:
		fmt.Fprintf(stderr, "goroce lab: unknown action %q (want up or down)\n", verb)
		return exitUsage
	}
	return exitOK
}

func needRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces and veth need CAP_SYS_ADMIN and CAP_NET_ADMIN)")
	}
	return nil
}

func labUp(prefix string, mtu, loss int, stdout io.Writer) (err error) {
	if err := needRoot(); err != nil {
		return err
	}
	hosts := labHosts(prefix)
	var made []*netcfg.NetNS
	defer func() {
		for _, ns := range made {
			if err != nil {
				ns.Delete() // undo a half-built lab
			} else {
				ns.Close()
			}
		}
	}()
	for _, h := range hosts {
		ns, err := netcfg.NewNetNS(h.ns)
		if err != nil {
			if errors.Is(err, os.ErrExist) || errorContains(err, "already exists") {
				return fmt.Errorf("namespace %s already exists (goroce lab down --name %s, or choose another --name)", h.ns, prefix)
			}
			return err
		}
		made = append(made, ns)
		// Link-local IPv6 addresses usable at once (no DAD wait).
		for _, k := range []string{"all", "default"} {
			if err := netcfg.SetSysctl(ns, "net/ipv6/conf/"+k+"/accept_dad", "0"); err != nil {
				return err
			}
		}
	}
	if err := netcfg.VethPair(hosts[0].ifname, hosts[1].ifname, made[0], made[1], mtu); err != nil {
		return err
	}
	macs := [2]string{}
	for i, h := range hosts {
		ns := made[i]
		if err := netcfg.SetAlias(ns, h.ifname, labMarker(prefix)); err != nil {
			return err
		}
		for _, p := range []netip.Prefix{h.v4, h.v6} {
			if err := netcfg.AddAddr(ns, h.ifname, p); err != nil {
				return err
			}
		}
		if err := ns.Do(func() error {
			mac, err := netcfg.HardwareAddr(h.ifname)
			macs[i] = mac.String()
			return err
		}); err != nil {
			return err
		}
		if loss > 0 {
			if err := netcfg.AddLoss(ns, h.ifname, loss); err != nil {
				return err
			}
		}
	}
	a, b := hosts[0], hosts[1]
	fmt.Fprintf(stdout, "lab %q is up:\n", prefix)
	for i, h := range hosts {
		fmt.Fprintf(stdout, "  namespace %-12s %s  %v  %v  MAC %s  MTU %d\n", h.ns, h.ifname, h.v4, h.v6, macs[i], mtu)
	}
	if loss > 0 {
		fmt.Fprintf(stdout, "  %d%% of RoCE frames dropped in each direction (nftables table netdev %s)\n", loss, netcfg.LossTable)
	}
	fmt.Fprintf(stdout, "\nRaw Ethernet (AF_PACKET), RoCEv2 (add --encap roce1 on both sides for RoCEv1):\n")
	fmt.Fprintf(stdout, "  ip netns exec %s goroce pingpong --link afpacket --dev %s\n", b.ns, b.ifname)
	fmt.Fprintf(stdout, "  ip netns exec %s goroce pingpong --link afpacket --dev %s %v\n", a.ns, a.ifname, b.v4.Addr())
	fmt.Fprintf(stdout, "Kernel UDP sockets:\n")
	fmt.Fprintf(stdout, "  ip netns exec %s goroce pingpong --addr %v\n", b.ns, b.v4.Addr())
	fmt.Fprintf(stdout, "  ip netns exec %s goroce pingpong --addr %v %v\n", a.ns, a.v4.Addr(), b.v4.Addr())
	fmt.Fprintf(stdout, "Remove it with: goroce lab down --name %s\n", prefix)
	return nil
}

func errorContains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

// labDown deletes the lab's namespaces after checking that both are the
// ones `lab up` made (their veth carries the lab's alias). It deletes
// nothing unless every namespace present passes the check.
func labDown(prefix string, stdout io.Writer) error {
	if err := needRoot(); err != nil {
		return err
	}
	var found []*netcfg.NetNS
	defer func() {
		for _, ns := range found {
			ns.Close()
		}
	}()
	for _, h := range labHosts(prefix) {
		ns, err := netcfg.OpenNetNS(h.ns)
		if err != nil {
			if _, serr := os.Stat(netcfg.NetNSDir + "/" + h.ns); errors.Is(serr, os.ErrNotExist) {
				continue
			}
			return err
		}
		found = append(found, ns)
		var alias string
		err = ns.Do(func() error {
			l, err := netcfg.LinkByName(h.ifname)
			alias = l.Alias
			return err
		})
		if err != nil || alias != labMarker(prefix) {
			return fmt.Errorf("namespace %s was not made by goroce lab up (no %s with alias %q); not deleting anything (ip netns delete %s removes it)",
				h.ns, h.ifname, labMarker(prefix), h.ns)
		}
	}
	if len(found) == 0 {
		return fmt.Errorf("no lab named %q (no namespace %s-a or %s-b)", prefix, prefix, prefix)
	}
	for _, ns := range found {
		if err := ns.Delete(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted namespace %s\n", ns.Name())
	}
	found = nil
	return nil
}
