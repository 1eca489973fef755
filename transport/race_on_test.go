//go:build race

package transport_test

// raceEnabled scales the long simulations down under the race detector,
// which makes them ~30x slower.
const raceEnabled = true
