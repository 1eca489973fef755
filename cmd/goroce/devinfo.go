package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/goroce/goroce/hca"
)

func init() {
	register(&command{name: "devinfo", summary: "print the soft HCA's attributes as ibv_devinfo does", run: runDevinfo})
}

const devinfoHelp = `Opens goroce's soft HCA on the configured link (default: the udp link on
127.0.0.1, which binds UDP port 4791 there, so it fails while another goroce
or kernel rdma_rxe holds that port) and prints it in the layout of
rdma-core's ibv_devinfo: device attributes, then each port; -v adds the
device limits, the port details and the GID table.

`

func runDevinfo(args []string, stdout, stderr io.Writer) int {
	const name = "goroce devinfo"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	devName := fs.String("d", hca.DefaultName, "name of the goroce `device`")
	fs.StringVar(devName, "ib-dev", hca.DefaultName, "same as -d")
	verbose := fs.Bool("v", false, "print all the attributes of the device")
	fs.BoolVar(verbose, "verbose", false, "same as -v")
	port := fs.Int("i", 0, "print only `port` (default all ports)")
	fs.IntVar(port, "ib-port", 0, "same as -i")
	list := fs.Bool("l", false, "print only the device name")
	fs.BoolVar(list, "list", false, "same as -l")
	lf := addLinkFlags(fs)
	fs.Usage = func() {
		usageFunc(fs, "goroce devinfo [-d DEV] [-v] [-i PORT] [-l] [link flags]")()
		fmt.Fprintln(fs.Output())
		fmt.Fprint(fs.Output(), devinfoHelp)
		fmt.Fprintln(fs.Output(), linkUsage)
	}
	pos, status, ok := parseInterspersed(fs, args, stdout, stderr)
	if !ok {
		return status
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", name, pos[0])
		return exitUsage
	}
	if *port < 0 {
		fmt.Fprintf(stderr, "%s: -i %d: ports start at 1\n", name, *port)
		return exitUsage
	}
	// Checked before -l too: the list names the device these settings
	// would open, and there is none on a link that cannot be configured.
	ls, err := lf.settings()
	if err != nil {
		return linkExit(stderr, name, err)
	}
	if *devName == "" {
		*devName = hca.DefaultName // as hca.Open names it
	}
	if *list {
		// One device per link configuration: the list is its name.
		fmt.Fprintf(stdout, "1 HCA found:\n\t%s\n\n", *devName)
		return exitOK
	}
	od, err := openDevice(ls, "", *devName)
	if err != nil {
		return linkExit(stderr, name, err)
	}
	defer od.Close()
	if n := od.Dev.Query().PhysPortCnt; *port > n {
		ports := "ports 1 to " + strconv.Itoa(n)
		if n == 1 {
			ports = "port 1 only"
		}
		fmt.Fprintf(stderr, "%s: -i %d: invalid port requested for device %s (it has %s)\n", name, *port, od.Dev.Name(), ports)
		return exitFail
	}
	w := bufio.NewWriter(stdout)
	printDevinfo(w, od.Dev, *verbose, *port)
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitFail
	}
	return exitOK
}

// Values of verbs.h enums and flags that devinfo prints as numbers.
const (
	transportIB = 0 // IBV_TRANSPORT_IB: rxe reports InfiniBand on Ethernet too

	devCapSysImageGUID = 1 << 11 // IBV_DEVICE_SYS_IMAGE_GUID
	devCapRCRNRNAKGen  = 1 << 12 // IBV_DEVICE_RC_RNR_NAK_GEN

	portCapIPBasedGIDs = 1 << 26 // IBV_PORT_IP_BASED_GIDS (RoCE)
)

// devinfoDevCaps are the device_cap_flags goroce's HCA honours.
const devinfoDevCaps = devCapSysImageGUID | devCapRCRNRNAKGen

// printDevinfo writes d in the layout of rdma-core's
// libibverbs/examples/devinfo.c (print_hca_cap), with the RoCE GID lines of
// rdma-core >= 17 ("GID[  1]:\t\t::ffff:10.0.0.1, RoCE v2").
func printDevinfo(w io.Writer, d *hca.Device, verbose bool, onlyPort int) {
	a := d.Query()
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("hca_id:\t%s\n", d.Name())
	p("\ttransport:\t\t\t%s (%d)\n", "InfiniBand", transportIB)
	if a.FWVer != "" {
		p("\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	}
	p("\tnode_guid:\t\t\t%s\n", guidString(a.NodeGUID))
	p("\tsys_image_guid:\t\t\t%s\n", guidString(a.SysImageGUID))
	p("\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	p("\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	p("\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	p("\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		p("\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
		p("\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
		p("\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
		p("\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
		p("\tdevice_cap_flags:\t\t0x%08x\n", devinfoDevCaps)
		p("\t\t\t\t\tSYS_IMAGE_GUID\n")
		p("\t\t\t\t\tRC_RNR_NAK_GEN\n")
		p("\tmax_sge:\t\t\t%d\n", a.MaxSGE)
		p("\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERd)
		p("\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
		p("\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
		p("\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
		p("\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
		p("\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
		p("\tmax_ee_rd_atom:\t\t\t%d\n", 0)
		p("\tmax_res_rd_atom:\t\t%d\n", a.MaxResRdAtom)
		p("\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
		p("\tmax_ee_init_rd_atom:\t\t%d\n", 0)
		p("\tatomic_cap:\t\t\t%s (%d)\n", a.AtomicCap, atomicCapCode(a.AtomicCap))
		p("\tmax_ee:\t\t\t\t%d\n", 0)
		p("\tmax_rdd:\t\t\t%d\n", 0)
		p("\tmax_mw:\t\t\t\t%d\n", 0)
		p("\tmax_raw_ipv6_qp:\t\t%d\n", 0)
		p("\tmax_raw_ethy_qp:\t\t%d\n", 0)
		p("\tmax_mcast_grp:\t\t\t%d\n", 0)
		p("\tmax_mcast_qp_attach:\t\t%d\n", 0)
		p("\tmax_total_mcast_qp_attach:\t%d\n", 0)
		p("\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
		p("\tmax_fmr:\t\t\t%d\n", 0)
		p("\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
		if a.MaxSRQ != 0 {
			p("\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
			p("\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
		}
		p("\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
		p("\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)
		p("\tgeneral_odp_caps:\n")
		for _, t := range []string{"rc", "uc", "ud", "xrc"} {
			p("\t%s_odp_caps:\n\t\t\t\t\tNO SUPPORT\n", t)
		}
		p("\tcompletion_timestamp_mask not supported\n")
		p("\tcore clock not supported\n")
		p("\tdevice_cap_flags_ex:\t\t0x%X\n", uint64(devinfoDevCaps))
		p("\ttso_caps:\n\tmax_tso:\t\t\t0\n")
		p("\trss_caps:\n")
		p("\t\tmax_rwq_indirection_tables:\t\t\t0\n")
		p("\t\tmax_rwq_indirection_table_size:\t\t\t0\n")
		p("\t\trx_hash_function:\t\t\t\t0x0\n")
		p("\t\trx_hash_fields_mask:\t\t\t\t0x0\n")
		p("\tmax_wq_type_rq:\t\t\t0\n")
		p("\tpacket_pacing_caps:\n\t\tqp_rate_limit_min:\t0kbps\n\t\tqp_rate_limit_max:\t0kbps\n")
		p("\ttag matching not supported\n")
	}
	for port := 1; port <= a.PhysPortCnt; port++ {
		if onlyPort != 0 && port != onlyPort {
			continue
		}
		pa := d.QueryPort()
		p("\t\tport:\t%d\n", port)
		p("\t\t\tstate:\t\t\t%s (%d)\n", pa.State, portStateCode(pa.State))
		p("\t\t\tmax_mtu:\t\t%d (%d)\n", pa.MaxMTU.Bytes(), pa.MaxMTU)
		p("\t\t\tactive_mtu:\t\t%d (%d)\n", pa.ActiveMTU.Bytes(), pa.ActiveMTU)
		p("\t\t\tsm_lid:\t\t\t%d\n", pa.SMLID)
		p("\t\t\tport_lid:\t\t%d\n", pa.LID)
		p("\t\t\tport_lmc:\t\t0x%02x\n", pa.LMC)
		p("\t\t\tlink_layer:\t\t%s\n", pa.LinkLayer)
		if verbose {
			p("\t\t\tmax_msg_sz:\t\t0x%x\n", pa.MaxMsgSize)
			p("\t\t\tport_cap_flags:\t\t0x%08x\n", portCapIPBasedGIDs)
			p("\t\t\tport_cap_flags2:\t0x%04x\n", 0)
			p("\t\t\tmax_vl_num:\t\t%s (%d)\n", "1", 1)
			p("\t\t\tbad_pkey_cntr:\t\t0x%x\n", 0)
			p("\t\t\tqkey_viol_cntr:\t\t0x%x\n", 0)
			p("\t\t\tsm_sl:\t\t\t%d\n", 0)
			p("\t\t\tpkey_tbl_len:\t\t%d\n", pa.PKeyTblLen)
			p("\t\t\tgid_tbl_len:\t\t%d\n", pa.GIDTblLen)
			p("\t\t\tsubnet_timeout:\t\t%d\n", 0)
			p("\t\t\tinit_type_reply:\t%d\n", 0)
			p("\t\t\tactive_width:\t\t%s (%d)\n", pa.ActiveWidth, widthCode(pa.ActiveWidth))
			p("\t\t\tactive_speed:\t\t%s (%d)\n", pa.ActiveSpeed, speedCode(pa.ActiveSpeed))
			p("\t\t\tphys_state:\t\t%s (%d)\n", pa.PhysState, physStateCode(pa.PhysState))
			for _, g := range d.GIDs() {
				printGID(w, g, pa.LinkLayer)
			}
		}
		p("\n")
	}
}

// printGID is print_formated_gid: RoCE v2 GIDs as inet_ntop prints them,
// RoCE v1 (and IB) GIDs as eight groups of four hex digits; null GIDs
// (interface ID zero) are skipped as null_gid does.
func printGID(w io.Writer, g hca.GIDEntry, linkLayer string) {
	if g.GID == (hca.GID{}) || [8]byte(g.GID[8:]) == [8]byte{} {
		return
	}
	suffix := ""
	if linkLayer == "Ethernet" {
		suffix = ", " + g.Type
	}
	if g.Type == "RoCE v2" {
		fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s%s\n", g.Index, netip.AddrFrom16(g.GID).String(), suffix)
		return
	}
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x%02x", g.GID[i], g.GID[i+1])
	}
	fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s%s\n", g.Index, b.String(), suffix)
}

// guidString is devinfo.c's guid_str: four groups of four hex digits.
func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

func atomicCapCode(s string) int {
	switch s {
	case "ATOMIC_HCA":
		return 1
	case "ATOMIC_GLOB":
		return 2
	}
	return 0 // ATOMIC_NONE
}

func portStateCode(s string) int {
	switch s {
	case "PORT_DOWN":
		return 1
	case "PORT_INIT":
		return 2
	case "PORT_ARMED":
		return 3
	case "PORT_ACTIVE":
		return 4
	}
	return 0
}

// widthCode is the ibv_port_attr.active_width encoding of "NX".
func widthCode(s string) int {
	switch strings.TrimSuffix(s, "X") {
	case "1":
		return 1
	case "4":
		return 2
	case "8":
		return 4
	case "12":
		return 8
	case "2":
		return 16
	}
	return 0
}

func speedCode(s string) int {
	switch s {
	case "2.5 Gbps":
		return 1
	case "5.0 Gbps":
		return 2
	case "10.0 Gbps":
		return 4
	case "14.0 Gbps":
		return 16
	case "25.0 Gbps":
		return 32
	case "50.0 Gbps":
		return 64
	}
	return 0
}

func physStateCode(s string) int {
	switch s {
	case "SLEEP":
		return 1
	case "POLLING":
		return 2
	case "DISABLED":
		return 3
	case "LINK_UP":
		return 5
	case "LINK_ERROR_RECOVERY":
		return 6
	}
	return 0
}
