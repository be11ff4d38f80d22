package count

import "testing"

func TestOf(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Of(0, "agent"), "0 agents"},
		{Of(1, "agent"), "1 agent"},
		{Of(2, "agent"), "2 agents"},
		{Of(int64(1), "tool use"), "1 tool use"},
		{Of(int64(-1), "token"), "-1 tokens"},
		{Of(uint64(1), "model call"), "1 model call"},
		{Of(uint64(12), "model call"), "12 model calls"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
