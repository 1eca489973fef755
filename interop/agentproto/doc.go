// Package agentproto is the wire protocol, guest-side server and host-side client of the
// interop command agent: the host runs shell commands inside the interop VM over a
// virtio-serial port, with streamed stdout/stderr, optional stdin, a timeout and the remote
// exit status, independent of the guest network under test.
//
// It owns only that protocol. It imports the standard library only and nothing else in the
// module; interop/agent (the static binary baked into the guest image) and the interop test
// driver import it.
//
// Framing (both directions): the 4-byte magic "GRIA", a 1-byte type, a 4-byte big-endian
// payload length (at most MaxPayload), the payload. Host to guest: 'S' sync (nonce),
// 'C' command (JSON Request), 'I' stdin bytes, 'E' stdin EOF, 'K' signal (1 byte).
// Guest to host: 'A' sync acknowledgement (the nonce), 'O' stdout, 'R' stderr,
// 'X' exit (JSON Exit).
//
// A virtio-serial port outlives its users: a host client may die half-way through a frame or
// while a command runs. Every connection therefore starts with zero padding longer than the
// largest frame followed by a sync frame; the guest aborts whatever ran on that port, and the
// host discards everything until the acknowledgement carrying its own nonce. Readers
// re-synchronise on the magic, so garbage between frames is skipped, never misparsed.
package agentproto
