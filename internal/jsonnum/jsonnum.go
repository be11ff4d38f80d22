// Package jsonnum writes a float64 as encoding/json writes it (and
// protojson, which follows it), so that the hand-written JSON encoders
// (report's --summary.json lines, egress's traces file) agree byte for byte
// with the encoders they replace without writing the rule twice.
package jsonnum

import (
	"math"
	"strconv"
)

// AppendFloat appends a finite f as encoding/json does: the shortest
// representation, in exponent form below 1e-6 and from 1e21, with a
// two-digit exponent cut to one ("1e-7", not "1e-07"). NaN and ±Inf are
// the caller's to handle (encoding/json refuses them; protojson quotes
// them).
func AppendFloat(dst []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}
