package exchange

const hexDigits = "0123456789abcdef"

// putHex writes v as exactly len(dst) lowercase hex digits, like printf
// "%0Nx" for a value that fits in N digits. Higher digits are dropped, so
// callers mask values to the field width first.
func putHex(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = hexDigits[v&0xF]
		v >>= 4
	}
}

// parseHex decodes a field of lowercase hex digits (the only form printf
// "%x" produces). It reports false on any other byte or an empty field.
func parseHex(src []byte) (uint64, bool) {
	if len(src) == 0 || len(src) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range src {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}
