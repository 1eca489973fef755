//go:build !amd64 || purego

package wire

// fold4Min is as on amd64, for the tests.
const fold4Min = 256

// haveFold4 is false: fold512x4 is amd64 assembly.
const haveFold4 = false

func fold4Update(crc uint32, p []byte) uint32 { panic("wire: fold4Update without fold512x4") }
