package netcfg

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// ErrNoNFT is wrapped when the nft binary is not installed.
var ErrNoNFT = errors.New("nft (nftables) not found in PATH")

// LossTable is the nftables table (family netdev) AddLoss creates.
const LossTable = "goroce"

// AddLoss makes ns drop, at random, percent of the RoCE frames leaving
// ifname: RoCEv2 (UDP destination port 4791 over IPv4 or IPv6) and RoCEv1
// (ethertype 0x8915). It needs no netem: it runs
//
//	table netdev goroce {
//	  chain egress_IFNAME { type filter hook egress device IFNAME priority 0;
//	    udp dport 4791 numgen random mod 100 < PERCENT drop
//	    ether type 0x8915 numgen random mod 100 < PERCENT drop } }
//
// through nft inside the namespace. The egress hook (Linux 5.16) is used
// rather than an inet input/output chain because it is the only netfilter
// hook AF_PACKET traffic passes: a packet socket's sends skip the IP
// stack, and its receive tap (ETH_P_ALL) sees frames before the ingress
// hook. Frames from the kernel IP stack (UDP and TUN links) pass it too. A
// veth's egress is its peer's receive, so call AddLoss in both namespaces
// to lose frames in both directions. A frame dropped there makes an
// AF_PACKET send fail with ENOBUFS (the afpacket link counts it as lost).
func AddLoss(ns *NetNS, ifname string, percent int) error {
	if percent <= 0 || percent > 100 {
		return fmt.Errorf("netcfg: loss on %q: percent %d not in 1..100", ifname, percent)
	}
	if err := checkName(ifname); err != nil {
		return err
	}
	if strings.ContainsAny(ifname, "\"\\ \n;") {
		return fmt.Errorf("netcfg: loss on %q: unusable interface name for nft", ifname)
	}
	// Recent kernels accept a hook on a device that does not exist yet;
	// a missing interface here is a mistake, so say so.
	if err := ns.Do(func() error { _, err := linkByName(ifname); return err }); err != nil {
		return fmt.Errorf("netcfg: loss on %q in %s: %w", ifname, ns, err)
	}
	// numgen yields 0..99; "< 100" is out of nft's range, so 100% is an
	// unconditional drop.
	match := fmt.Sprintf("numgen random mod 100 < %d ", percent)
	if percent == 100 {
		match = ""
	}
	rules := fmt.Sprintf(`table netdev %[1]s {
	chain egress_%[2]s {
		type filter hook egress device "%[3]s" priority 0; policy accept;
		udp dport 4791 %[4]scounter drop
		ether type 0x8915 %[4]scounter drop
	}
}
`, LossTable, chainSuffix(ifname), ifname, match)
	return runNFT(ns, fmt.Sprintf("loss on %q", ifname), rules)
}

// RemoveLoss deletes the table AddLoss created in ns (all its chains).
func RemoveLoss(ns *NetNS) error {
	return runNFT(ns, "removing loss rules", "delete table netdev "+LossTable+"\n")
}

// chainSuffix turns an interface name into an nft identifier.
func chainSuffix(ifname string) string {
	b := []byte(ifname)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// runNFT feeds script to `nft -f -` in ns. The child is forked from the
// thread NetNS.Do locked inside the namespace, so it starts there.
func runNFT(ns *NetNS, what, script string) error {
	nft, err := exec.LookPath("nft")
	if err != nil {
		return fmt.Errorf("netcfg: %s: %w", what, ErrNoNFT)
	}
	return ns.Do(func() error {
		cmd := exec.Command(nft, "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("netcfg: %s in %s: nft: %v: %s", what, ns, err, strings.TrimSpace(out.String()))
		}
		return nil
	})
}

func errorsIsNoNFT(err error) bool { return errors.Is(err, ErrNoNFT) }

func lookNFT() (string, error) { return exec.LookPath("nft") }
