// Package pcap owns everything goroce does with capture files and with
// gopacket:
//
//   - gopacket layer types for the InfiniBand headers (LRH, GRH, BTH with its
//     extended transport headers) and for ERF records, registered so that
//     gopacket.NewPacket decodes Ethernet → IPv4/IPv6 → UDP:4791 → BTH,
//     Ethernet(0x8915) → GRH → BTH, LINKTYPE_INFINIBAND (247) → LRH and
//     LINKTYPE_ERF (197) records of type 0x15 → LRH;
//   - reading pcap and pcapng files (pcapgo) of link types Ethernet (1), raw IP
//     (101, 228, 229), Linux cooked captures of `tcpdump -i any` (SLL 113,
//     SLL2 276, whose IP packets are passed on as raw IP), ERF (197) and
//     InfiniBand (247) into frames with the framing wire.Packet.Decode
//     expects;
//   - writing pcap files (pcapgo) for Ethernet and raw IP, and ERF-in-pcap
//     (link type 197, ERF record type 0x15) for native InfiniBand, which is
//     the only native IB form Wireshark opens;
//   - the capture Tap: a link.Endpoint decorator that records every frame
//     read and written without back-pressuring the datapath;
//   - the logic behind `goroce pcap verify` (Verify) and `goroce pcap gen`
//     (Generate).
//
// This is the only goroce package that may import github.com/google/gopacket.
// It imports the standard library, gopacket (layers, pcapgo) and goroce's bth,
// wire and hca/link packages.
package pcap
