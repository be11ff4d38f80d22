// Package tap is the hand-over between the passthrough pipe of a wrapped
// child and its telemetry: a Tap is a bounded byte queue whose writer never
// waits (it drops and counts when full), and Merge drains the stdout and
// stdin taps in the order their bytes passed the wrapper. A pump gives a Tap
// only io.Writer's Write, before it passes the bytes on. The package knows
// no protocol.
package tap
