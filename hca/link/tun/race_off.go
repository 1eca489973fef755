//go:build !race

package tun

func raceRelease() {}
func raceAcquire() {}
