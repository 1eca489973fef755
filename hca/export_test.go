package hca

import "time"

// SetCrossFlushAge sets how old one device's busy-poll deferral must be
// before a Poll on another device of the process sends it, and returns a
// func that restores the old age.
func SetCrossFlushAge(d time.Duration) (restore func()) {
	old := crossFlushAge.Swap(int64(d))
	return func() { crossFlushAge.Store(old) }
}

// SetRegisterHook makes RegMR and CreateAH call f after their checks and
// before their table add, and returns a func that removes it.
func SetRegisterHook(f func()) (restore func()) {
	registerHook = f
	return func() { registerHook = nil }
}
