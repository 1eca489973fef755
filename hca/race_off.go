//go:build !race

package hca

func raceReleaseLink() {}
func raceAcquireLink() {}
