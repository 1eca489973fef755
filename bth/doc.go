// Package bth owns the InfiniBand transport headers: the Base Transport Header
// and every extended transport header (RDETH, DETH, RETH, AtomicETH, AETH,
// AtomicAckETH, ImmDt, IETH, FETH), the opcode table, and the small value
// types of the transport layer (PSN, QPN, P_Key, Q_Key, R_Key, L_Key, path
// MTU, AETH syndrome, RNR timer and local ACK timeout encodings).
//
// Headers are views over []byte in the style of gVisor's header package:
// accessors never bounds-check, so callers check the length first (each view
// has a Len constant and the opcode table says which headers follow a BTH).
// 24-bit fields are masked on read and write, and setters preserve the bits
// that share a byte with the field they set.
//
// Everything follows IBA Vol 1 chapter 9 and the RoCEv2 annex A17 as
// implemented by Linux rxe; see docs/wire-spec.md in the shared folder.
//
// This package imports the standard library only.
package bth
