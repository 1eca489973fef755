package main

import (
	"net"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/hca"
	"github.com/goroce/goroce/hca/link/udp"
)

// The layout of rdma-core's ibv_devinfo (libibverbs/examples/devinfo.c,
// print_hca_cap) for a RoCE device: tabs exactly as its printf formats.
const devinfoWant = "hca_id:\tgoroce7\n" +
	"\ttransport:\t\t\tInfiniBand (0)\n" +
	"\tfw_ver:\t\t\t\t0.1.0\n" +
	"\tnode_guid:\t\t\t0267:6fff:fe72:6365\n" +
	"\tsys_image_guid:\t\t\t0267:6fff:fe72:6365\n" +
	"\tvendor_id:\t\t\t0xffffff\n" +
	"\tvendor_part_id:\t\t\t0\n" +
	"\thw_ver:\t\t\t\t0x0\n" +
	"\tphys_port_cnt:\t\t\t1\n" +
	"\t\tport:\t1\n" +
	"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n" +
	"\t\t\tmax_mtu:\t\t4096 (5)\n" +
	"\t\t\tactive_mtu:\t\t1024 (3)\n" +
	"\t\t\tsm_lid:\t\t\t0\n" +
	"\t\t\tport_lid:\t\t0\n" +
	"\t\t\tport_lmc:\t\t0x00\n" +
	"\t\t\tlink_layer:\t\tEthernet\n" +
	"\n"

// devinfoVerboseLabels are the labels ibv_devinfo -v prints, in order
// (device section, then the port section), as "\t...label:" prefixes.
var devinfoVerboseLabels = []string{
	"hca_id:", "\ttransport:", "\tfw_ver:", "\tnode_guid:", "\tsys_image_guid:", "\tvendor_id:",
	"\tvendor_part_id:", "\thw_ver:", "\tphys_port_cnt:", "\tmax_mr_size:", "\tpage_size_cap:",
	"\tmax_qp:", "\tmax_qp_wr:", "\tdevice_cap_flags:", "\t\t\t\t\tSYS_IMAGE_GUID", "\t\t\t\t\tRC_RNR_NAK_GEN",
	"\tmax_sge:", "\tmax_sge_rd:", "\tmax_cq:", "\tmax_cqe:", "\tmax_mr:", "\tmax_pd:",
	"\tmax_qp_rd_atom:", "\tmax_ee_rd_atom:", "\tmax_res_rd_atom:", "\tmax_qp_init_rd_atom:",
	"\tmax_ee_init_rd_atom:", "\tatomic_cap:", "\tmax_ee:", "\tmax_rdd:", "\tmax_mw:",
	"\tmax_raw_ipv6_qp:", "\tmax_raw_ethy_qp:", "\tmax_mcast_grp:", "\tmax_mcast_qp_attach:",
	"\tmax_total_mcast_qp_attach:", "\tmax_ah:", "\tmax_fmr:", "\tmax_srq:", "\tmax_srq_wr:",
	"\tmax_srq_sge:", "\tmax_pkeys:", "\tlocal_ca_ack_delay:",
	"\tgeneral_odp_caps:", "\trc_odp_caps:", "\t\t\t\t\tNO SUPPORT", "\tuc_odp_caps:", "\t\t\t\t\tNO SUPPORT",
	"\tud_odp_caps:", "\t\t\t\t\tNO SUPPORT", "\txrc_odp_caps:", "\t\t\t\t\tNO SUPPORT",
	"\tcompletion_timestamp_mask not supported", "\tcore clock not supported", "\tdevice_cap_flags_ex:",
	"\ttso_caps:", "\tmax_tso:", "\trss_caps:", "\t\tmax_rwq_indirection_tables:",
	"\t\tmax_rwq_indirection_table_size:", "\t\trx_hash_function:", "\t\trx_hash_fields_mask:",
	"\tmax_wq_type_rq:", "\tpacket_pacing_caps:", "\t\tqp_rate_limit_min:", "\t\tqp_rate_limit_max:",
	"\ttag matching not supported",
	"\t\tport:", "\t\t\tstate:", "\t\t\tmax_mtu:", "\t\t\tactive_mtu:", "\t\t\tsm_lid:", "\t\t\tport_lid:",
	"\t\t\tport_lmc:", "\t\t\tlink_layer:", "\t\t\tmax_msg_sz:", "\t\t\tport_cap_flags:",
	"\t\t\tport_cap_flags2:", "\t\t\tmax_vl_num:", "\t\t\tbad_pkey_cntr:", "\t\t\tqkey_viol_cntr:",
	"\t\t\tsm_sl:", "\t\t\tpkey_tbl_len:", "\t\t\tgid_tbl_len:", "\t\t\tsubnet_timeout:",
	"\t\t\tinit_type_reply:", "\t\t\tactive_width:", "\t\t\tactive_speed:", "\t\t\tphys_state:",
	"\t\t\tGID[  0]:", "",
}

func TestDevinfo(t *testing.T) {
	needRawSocket(t)
	st, out, errOut := runCLI("devinfo", "-d", "goroce7", "--addr", "127.0.77.31", "--link-mtu", "1500")
	if st != exitOK || errOut != "" {
		t.Fatalf("status %d, stderr %q", st, errOut)
	}
	if out != devinfoWant {
		t.Fatalf("devinfo output\n%q\nwant\n%q", out, devinfoWant)
	}
}

func TestDevinfoVerbose(t *testing.T) {
	needRawSocket(t)
	st, out, errOut := runCLI("devinfo", "-v", "-d", "goroce7", "--addr", "127.0.77.32")
	if st != exitOK || errOut != "" {
		t.Fatalf("status %d, stderr %q", st, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(devinfoVerboseLabels) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(devinfoVerboseLabels), out)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, devinfoVerboseLabels[i]) {
			t.Errorf("line %d %q, want it to start with %q", i, l, devinfoVerboseLabels[i])
		}
	}
	for _, want := range []string{
		"\tmax_mr_size:\t\t\t0xffffffffffffffff\n",
		"\tmax_qp_rd_atom:\t\t\t128\n",
		"\tatomic_cap:\t\t\tATOMIC_HCA (1)\n",
		"\t\t\tactive_mtu:\t\t4096 (5)\n", // loopback: MTU 65536
		"\t\t\tmax_msg_sz:\t\t0x80000000\n",
		"\t\t\tgid_tbl_len:\t\t1024\n",
		"\t\t\tactive_width:\t\t1X (1)\n",
		"\t\t\tactive_speed:\t\t2.5 Gbps (1)\n",
		"\t\t\tphys_state:\t\tLINK_UP (5)\n",
		"\t\t\tGID[  0]:\t\t::ffff:127.0.77.32, RoCE v2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in output", want)
		}
	}
	// Every "label:\tvalue" line has its tabs where devinfo.c's formats put them.
	tabbed := regexp.MustCompile(`^\t*[a-z_A-Z\[\] 0-9]+:\t+\S`)
	for _, l := range lines {
		if strings.Contains(l, ":") && !strings.HasSuffix(l, ":") && !tabbed.MatchString(l) {
			t.Errorf("line %q is not label:<tabs>value", l)
		}
	}
}

func TestDevinfoGIDFormats(t *testing.T) {
	var b strings.Builder
	mk := func(a string) [16]byte { return netip.MustParseAddr(a).As16() }
	printGID(&b, gidEntry(0, mk("fe80::5054:ff:fe77:2"), "RoCE v2"), "Ethernet")
	printGID(&b, gidEntry(1, mk("::ffff:10.77.0.2"), "RoCE v2"), "Ethernet")
	printGID(&b, gidEntry(2, mk("fe80::5054:ff:fe77:2"), "RoCE v1"), "Ethernet")
	printGID(&b, gidEntry(3, [16]byte{}, "RoCE v2"), "Ethernet")                   // null: skipped
	printGID(&b, gidEntry(4, mk("fe80::"), "RoCE v2"), "Ethernet")                 // interface ID zero: skipped
	printGID(&b, gidEntry(5, mk("fe80::5054:ff:fe77:2"), "RoCE v1"), "InfiniBand") // no type suffix on IB
	want := "\t\t\tGID[  0]:\t\tfe80::5054:ff:fe77:2, RoCE v2\n" +
		"\t\t\tGID[  1]:\t\t::ffff:10.77.0.2, RoCE v2\n" +
		"\t\t\tGID[  2]:\t\tfe80:0000:0000:0000:5054:00ff:fe77:0002, RoCE v1\n" +
		"\t\t\tGID[  5]:\t\tfe80:0000:0000:0000:5054:00ff:fe77:0002\n"
	if b.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestDevinfoList(t *testing.T) {
	st, out, _ := runCLI("devinfo", "-l", "-d", "goroce3")
	if st != exitOK || out != "1 HCA found:\n\tgoroce3\n\n" {
		t.Fatalf("status %d, output %q", st, out)
	}
	// -d "" opens the device under its default name; the list says so.
	st, out, _ = runCLI("devinfo", "-l", "-d", "")
	if st != exitOK || out != "1 HCA found:\n\t"+hca.DefaultName+"\n\n" {
		t.Fatalf("-d \"\": status %d, output %q", st, out)
	}
	// A link configuration that cannot open a device lists none.
	st, out, errOut := runCLI("devinfo", "-l", "--link", "carrier-pigeon")
	if st != exitUsage || out != "" || !strings.Contains(errOut, `unknown link "carrier-pigeon"`) {
		t.Fatalf("bad link: status %d, stdout %q, stderr %q", st, out, errOut)
	}
}

func TestDevinfoErrors(t *testing.T) {
	needRawSocket(t)
	addr := netip.MustParseAddr("127.0.77.33")
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, udp.DefaultPort)))
	if err != nil {
		t.Skipf("cannot hold %s:4791: %v", addr, err)
	}
	defer c.Close()
	for _, tc := range []struct {
		args   []string
		status int
		msg    string
	}{
		{[]string{"--addr", addr.String()}, exitFail, "already in use"},
		{[]string{"--dev", "nosuchif0"}, exitFail, `interface "nosuchif0" does not exist`},
		{[]string{"--addr", "192.0.2.9"}, exitFail, "not assigned to any interface"},
		{[]string{"--link", "carrier-pigeon"}, exitUsage, `unknown link "carrier-pigeon"`},
		{[]string{"-i", "2", "--addr", "127.0.77.34"}, exitFail, "-i 2: invalid port requested for device goroce0 (it has port 1 only)"},
		{[]string{"extra"}, exitUsage, `unexpected argument "extra"`},
	} {
		st, _, errOut := runCLI(append([]string{"devinfo"}, tc.args...)...)
		if st != tc.status || !strings.Contains(errOut, tc.msg) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: status %d, stderr %q; want %d containing %q on one line", tc.args, st, errOut, tc.status, tc.msg)
		}
	}
}

func gidEntry(i int, g [16]byte, typ string) hca.GIDEntry {
	return hca.GIDEntry{Index: i, GID: hca.GID(g), Type: typ}
}
