package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// newFlagSet returns the flag set of a subcommand, writing to w (stderr:
// stdout may belong to a child) and printing usage, then the flags, on -h.
func newFlagSet(name, usage string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs. When it returns false, the subcommand
// ends with code: 0 after -h, 2 after a bad flag (the flag package has
// said why).
func parseFlags(fs *flag.FlagSet, args []string) (ok bool, code int) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return true, exitOK
	case errors.Is(err, flag.ErrHelp):
		return false, exitOK
	}
	return false, exitUsage
}

// fail prints "cbc-otel CMD: err" to w and returns code.
func fail(w io.Writer, cmd string, code int, err error) int {
	fmt.Fprintf(w, "cbc-otel %s: %v\n", cmd, err)
	return code
}

func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "error":
		return slog.LevelError, nil
	case "warn":
		return slog.LevelWarn, nil
	case "info":
		return slog.LevelInfo, nil
	case "debug":
		return slog.LevelDebug, nil
	}
	return 0, fmt.Errorf("--log.level must be error, warn, info or debug, got %q", s)
}

// newLogger is cbc-otel's own logger: text on w (stderr) at a level
// validated by parseLogLevel beforehand.
func newLogger(w io.Writer, level string) *slog.Logger {
	l, _ := parseLogLevel(level)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
