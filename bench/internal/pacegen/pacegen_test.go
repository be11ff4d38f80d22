package pacegen

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestStampLine checks that the probe lines are valid JSON, carry their
// stamp where the reader looks for it, stay about 200 bytes, and run
// through whole task cycles (started, progress, notification).
func TestStampLine(t *testing.T) {
	var subtypes []string
	buf := make([]byte, 0, 256)
	for seq := -1; seq < 2*LatencyCycle; seq++ {
		before := time.Now().UnixNano()
		buf = StampLine(buf, seq)
		var l struct {
			Subtype string `json:"subtype"`
			TaskID  string `json:"task_id"`
			T       int64  `json:"t"`
		}
		if err := json.Unmarshal(buf, &l); err != nil {
			t.Fatalf("line %d: %v: %s", seq, err, buf)
		}
		if l.T < before || bytes.Count(buf, []byte(StampField)) != 1 {
			t.Fatalf("line %d: stamp %d (before %d): %s", seq, l.T, before, buf)
		}
		if len(buf) < 150 || len(buf) > 250 {
			t.Errorf("line %d is %d bytes", seq, len(buf))
		}
		if seq >= 0 {
			subtypes = append(subtypes, l.Subtype)
		}
	}
	for i, st := range subtypes {
		want := "task_progress"
		switch i % LatencyCycle {
		case 0:
			want = "task_started"
		case LatencyCycle - 1:
			want = "task_notification"
		}
		if st != want {
			t.Fatalf("line %d is %s, want %s", i, st, want)
		}
	}
}
