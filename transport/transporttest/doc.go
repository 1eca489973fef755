// Package transporttest provides in-memory implementations of the
// interfaces a transport engine consumes — memory regions with keys and
// guard bytes, a completion queue, a receive queue — and a simulated wire
// between two engines with a virtual clock and seeded fault injection
// (loss, reordering, duplication, corruption-as-drop, delay). It exists for
// deterministic tests and benchmarks of package transport and its users
// (hca tests may use it too); it is not used in production paths.
//
// This package imports the standard library and goroce's bth and
// transport packages only.
package transporttest
