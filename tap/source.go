package tap

// Source says which stream bytes came from.
type Source uint8

// The tapped streams of a wrapped child. Merge orders them so.
const (
	// SourceStdout is what the child wrote to its stdout (the event stream).
	SourceStdout Source = iota
	// SourceStdin is what was written to the child's stdin (user messages and
	// control requests such as interrupt).
	SourceStdin
)

// String returns the label value used for the source in metrics and logs.
func (s Source) String() string {
	switch s {
	case SourceStdout:
		return "stdout"
	case SourceStdin:
		return "stdin"
	default:
		return "unknown"
	}
}

// NumSources is the number of Source values.
const NumSources = 2
