package durtext

import "testing"

func TestMillis(t *testing.T) {
	for ms, want := range map[int64]string{
		-1: "-", 0: "0ms", 999: "999ms", 1000: "1.00s", 12_345: "12.35s", 59_999: "60.00s",
		60_000: "1m00s", 245_000: "4m05s", 3_599_999: "59m59s", 3_600_000: "1h00m", 7_620_000: "2h07m",
	} {
		if got := Millis(ms); got != want {
			t.Errorf("Millis(%d) = %q, want %q", ms, got, want)
		}
	}
}
