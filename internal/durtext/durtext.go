// Package durtext writes a duration in milliseconds the way cbc-otel's
// human outputs (the terminal waterfall, the runs page) show it: short,
// with the precision that matters at its scale. Internal: a shared format,
// not an API.
package durtext

import "fmt"

// Millis formats ms: "840ms", "12.35s", "4m05s", "2h07m"; "-" when
// negative (unknown).
func Millis(ms int64) string {
	switch {
	case ms < 0:
		return "-"
	case ms < 1000:
		return fmt.Sprintf("%dms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.2fs", float64(ms)/1000)
	case ms < 3_600_000:
		return fmt.Sprintf("%dm%02ds", ms/60_000, ms/1000%60)
	default:
		return fmt.Sprintf("%dh%02dm", ms/3_600_000, ms/60_000%60)
	}
}
