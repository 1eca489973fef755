package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/goroce/goroce/hca/netcfg"
)

func runCmd(args ...string) (status int, stdout, stderr string) {
	var o, e bytes.Buffer
	status = run(args, &o, &e)
	return status, o.String(), e.String()
}

func TestLabUsage(t *testing.T) {
	tests := []struct {
		args   []string
		status int
		want   string // in stdout+stderr
	}{
		{[]string{"lab"}, exitUsage, "want up or down"},
		{[]string{"lab", "--help"}, exitOK, "goroce lab up [--name PREFIX]"},
		{[]string{"lab", "--help"}, exitOK, "\n       goroce lab down [--name PREFIX]\n"},
		{[]string{"lab", "up", "--help"}, exitOK, "--loss PCT"},
		{[]string{"lab", "sideways"}, exitUsage, `unknown action "sideways"`},
		{[]string{"lab", "up", "--mtu", "20"}, exitUsage, "--mtu 20 out of range"},
		{[]string{"lab", "up", "--loss", "101"}, exitUsage, "--loss 101 out of range"},
		{[]string{"lab", "up", "--name", "a/b"}, exitUsage, `invalid --name "a/b"`},
		{[]string{"lab", "up", "--name", ""}, exitUsage, "invalid --name"},
		{[]string{"lab", "down", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"lab", "up", "--bogus"}, exitUsage, "flag provided but not defined"},
		// Flags before the action: the action is still found (an invalid
		// name proves the flag was read, without needing root).
		{[]string{"lab", "--name", "a/b", "up"}, exitUsage, `invalid --name "a/b"`},
		{[]string{"lab", "--mtu", "20", "up"}, exitUsage, "--mtu 20 out of range"},
		{[]string{"lab", "--name", "x"}, exitUsage, "want up or down"},
		{[]string{"lab", "-x", "up"}, exitUsage, "flag provided but not defined: -x"},
		{[]string{"lab", "up", "down"}, exitUsage, `unexpected argument "down"`},
		{[]string{"lab", "down", "--mtu", "9000"}, exitUsage, "--mtu applies to lab up only"},
		{[]string{"lab", "--loss", "5", "down"}, exitUsage, "--loss applies to lab up only"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			status, o, e := runCmd(tc.args...)
			if status != tc.status || !strings.Contains(o+e, tc.want) {
				t.Fatalf("status %d, output:\n%s%s\nwant status %d and %q", status, o, e, tc.status, tc.want)
			}
		})
	}
}

func TestLabNotRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as root: the privilege error cannot happen")
	}
	status, _, e := runCmd("lab", "up", "--name", "goroce-nonroot")
	if status != exitFail || !strings.Contains(e, "needs root") {
		t.Fatalf("status %d, stderr %q", status, e)
	}
}

// TestLabUpDown builds a lab with loss, checks what it made, refuses to
// build it twice, and tears it down; down leaves foreign namespaces alone.
func TestLabUpDown(t *testing.T) {
	netcfg.SkipUnlessRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		// As netcfg.TwoHosts does for its loss: --loss needs nftables.
		t.Skipf("lab up --loss needs nftables: %v (.ci/run installs it)", err)
	}
	prefix := fmt.Sprintf("gl%d", os.Getpid())
	t.Cleanup(func() {
		netcfg.DeleteNamedNetNS(prefix + "-a")
		netcfg.DeleteNamedNetNS(prefix + "-b")
	})
	status, o, e := runCmd("lab", "up", "--name", prefix, "--mtu", "4000", "--loss", "3")
	if status != exitOK {
		t.Fatalf("lab up: status %d\n%s%s", status, o, e)
	}
	for _, want := range []string{
		"namespace " + prefix + "-a", "10.99.0.2/24", "fd99::1/64", "MTU 4000", "3% of RoCE frames",
		"ip netns exec " + prefix + "-a goroce pingpong --link afpacket --dev veth-a 10.99.0.2",
		"goroce lab down --name " + prefix,
	} {
		if !strings.Contains(o, want) {
			t.Errorf("lab up output lacks %q:\n%s", want, o)
		}
	}
	for _, h := range labHosts(prefix) {
		ns, err := netcfg.OpenNetNS(h.ns)
		if err != nil {
			t.Fatal(err)
		}
		err = ns.Do(func() error {
			l, err := netcfg.LinkByName(h.ifname)
			if err != nil {
				return err
			}
			addrs, err := netcfg.Addrs(h.ifname)
			if err != nil {
				return err
			}
			if l.MTU != 4000 || !l.Up || l.Alias != labMarker(prefix) || len(addrs) < 2 || addrs[0] != h.v4.Addr() {
				return fmt.Errorf("%s in %s: %+v, addresses %v", h.ifname, h.ns, l, addrs)
			}
			return nil
		})
		ns.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if status, _, e := runCmd("lab", "up", "--name", prefix); status != exitFail || !strings.Contains(e, "already exists") {
		t.Fatalf("second lab up: status %d, %q", status, e)
	}
	if status, o, e := runCmd("lab", "down", "--name", prefix); status != exitOK || strings.Count(o, "deleted namespace") != 2 {
		t.Fatalf("lab down: status %d\n%s%s", status, o, e)
	}
	for _, h := range labHosts(prefix) {
		if _, err := os.Stat(netcfg.NetNSDir + "/" + h.ns); !os.IsNotExist(err) {
			t.Fatalf("%s still there after down: %v", h.ns, err)
		}
	}
	if status, _, e := runCmd("lab", "down", "--name", prefix); status != exitFail || !strings.Contains(e, "no lab named") {
		t.Fatalf("down twice: status %d, %q", status, e)
	}

	// A namespace that merely has the lab's name is not deleted.
	foreign, err := netcfg.NewNetNS(prefix + "-a")
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Delete()
	if status, _, e := runCmd("lab", "down", "--name", prefix); status != exitFail || !strings.Contains(e, "not made by goroce lab up") {
		t.Fatalf("down of a foreign namespace: status %d, %q", status, e)
	}
	if _, err := os.Stat(netcfg.NetNSDir + "/" + prefix + "-a"); err != nil {
		t.Fatalf("lab down removed a namespace it did not make: %v", err)
	}

	// A failed up undoes what it made: with PREFIX-b taken, PREFIX2-a must
	// not be left behind.
	p2 := prefix + "x"
	taken, err := netcfg.NewNetNS(p2 + "-b")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Delete()
	defer netcfg.DeleteNamedNetNS(p2 + "-a")
	if status, _, e := runCmd("lab", "up", "--name", p2); status != exitFail || !strings.Contains(e, p2+"-b already exists") {
		t.Fatalf("up with -b taken: status %d, %q", status, e)
	}
	if _, err := os.Stat(netcfg.NetNSDir + "/" + p2 + "-a"); !os.IsNotExist(err) {
		t.Fatalf("failed up left %s-a behind: %v", p2, err)
	}
}

// TestValidLabName checks the name rule against the regexp it replaced,
// ^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,29}$, on edge cases.
func TestValidLabName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"goroce", true}, {"a", true}, {".x", true}, {"_", true}, {"a-b.c_D9", true},
		{strings.Repeat("x", 30), true}, {strings.Repeat("x", 31), false},
		{"", false}, {"-a", false}, {"a/b", false}, {"a b", false}, {"é", false}, {"a\n", false},
	} {
		if got := validLabName(c.name); got != c.ok {
			t.Errorf("validLabName(%q) = %v, want %v", c.name, got, c.ok)
		}
	}
}
