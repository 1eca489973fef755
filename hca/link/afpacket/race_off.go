//go:build !race

package afpacket

func raceReleaseMerge() {}
func raceAcquire()      {}
