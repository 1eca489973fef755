// Package netcfg configures Linux networking for goroce's Ethernet and IP
// links and for tests: network namespaces (named, like `ip netns add`, and
// anonymous ones for tests), veth pairs, addresses, MTU, link state and
// routes, interface queries (addresses, MAC, MTU), a next-hop MAC Resolver
// backed by the kernel's routes and neighbour table (it satisfies
// hca.Resolver), random-loss rules through nftables, and test helpers
// (TwoHosts, SkipUnlessRoot) that build two hosts joined by a veth pair in
// fresh namespaces.
//
// Namespaces and threads. setns(2) changes only the calling OS thread, and
// the Go scheduler moves goroutines between threads, so every operation in
// another namespace runs through NetNS.Do: a fresh goroutine locks its OS
// thread, enters the namespace, runs the function, and restores the
// original namespace. If restoring fails the thread stays locked, so the
// runtime discards it when the goroutine ends instead of reusing a thread
// that sits in the wrong namespace (cilium testutils/netns_linux.go). A nil
// *NetNS means "the namespace of the calling thread"; functions that take
// no NetNS act on the calling thread's namespace, so call them inside Do to
// query another one. Sockets keep the namespace they were created in, so a
// link opened inside Do keeps working from any goroutine afterwards.
//
// This package imports the standard library, golang.org/x/sys/unix,
// github.com/vishvananda/netlink and github.com/vishvananda/netns; it is
// the only non-test, non-cmd package that imports the latter two. It
// imports "testing" for its test helpers only. It executes the nft binary
// for loss rules.
package netcfg
