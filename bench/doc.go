// Package bench owns goroce's perftest-like scenarios: connecting queue
// pairs (in one process, or with a peer over perftest's or the pingpong
// examples' TCP exchange, see bench/exchange), bandwidth and latency
// measurement, and the demo that checks every RDMA operation end to end.
// It uses only the public hca API; constructing links is the caller's job.
package bench
