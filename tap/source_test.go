package tap

import "testing"

func TestSourceString(t *testing.T) {
	for s, want := range map[Source]string{SourceStdout: "stdout", SourceStdin: "stdin", Source(9): "unknown"} {
		if got := s.String(); got != want {
			t.Errorf("Source(%d).String() = %q, want %q", s, got, want)
		}
	}
}
