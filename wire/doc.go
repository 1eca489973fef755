// Package wire owns the frame codec below the transport headers: header views
// for Ethernet (with one optional 802.1Q tag), IPv4, IPv6, UDP, the IB Local
// Route Header (LRH) and Global Route Header (GRH); the parsed packet
// descriptor (Packet, filled in place by Decode); the frame builder (Finish,
// which prepends every lower header into headroom and appends the ICRC and
// VCRC); and the two link-integrity CRCs, the invariant CRC (ICRC) and the
// variant CRC (VCRC).
//
// Four framings are understood (see Framing): Ethernet frames carrying
// RoCEv2 over IPv4/IPv6 + UDP 4791 or RoCEv1 (ethertype 0x8915 + GRH); bare
// IP packets (TUN devices, the UDP socket link); native InfiniBand packets
// (LRH [GRH] BTH ... ICRC VCRC); and bare BTH-first payloads of a plain UDP
// socket, whose ICRC cannot be checked because the IP header is not visible.
//
// Everything follows docs/wire-spec.md (IBA Vol 1 chapters 7 and 9, RoCEv2
// Annex A17) as implemented by Linux rxe, and was checked against real
// kernel rxe captures and real hardware packets (see the tests).
//
// Hot paths (Decode, Finish, ICRC, CRC16IB) never allocate, take no locks and
// read no clocks. Errors from Decode are sentinels; Explain gives the same
// verdict with an offset and a human-readable detail for tools.
//
// This package imports the standard library and goroce's bth package only.
// It performs no I/O.
package wire
