//go:build race

package hca_test

// raceEnabled scales the long runs down under the race detector, which
// makes them ~50x slower.
const raceEnabled = true
