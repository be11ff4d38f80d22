package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
)

// newFlagSet returns the flag set of subcommand cmd ("run"), writing to w
// (stderr: stdout may belong to a child) and printing usage, then the
// flags, on -h.
func newFlagSet(cmd, usage string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("cbc-otel "+cmd, flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		printFlags(fs)
		writeEnvUsage(fs.Output(), cmd)
	}
	return fs
}

// flagConfig is the one style in which run, serve, replay and demo keep
// their flags: a config type whose register defines them (with the
// config's values as defaults) and whose validate checks them after
// parsing, all problems in one error.
type flagConfig interface {
	register(fs *flag.FlagSet)
	validate() error
}

// parseFlags parses args into fs, stopping at the first argument that is
// not a flag. When it returns false, the subcommand ends with code: 0 after
// -h (the usage printed), 2 after a bad flag, said in one line.
func parseFlags(fs *flag.FlagSet, args []string) (ok bool, code int) {
	addAliases(fs)
	out, usage := fs.Output(), fs.Usage
	// The flag package would print the error, then the whole usage: one
	// line is what a mistyped flag deserves.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil && versionAsked(fs):
		fmt.Fprintf(out, "cbc-otel %s\n", buildVersion())
		return false, exitOK
	case err == nil:
		return true, exitOK
	case errors.Is(err, flag.ErrHelp):
		usage()
		return false, exitOK
	}
	fmt.Fprintf(out, "%s: %v (see '%s -h')\n", fs.Name(), err, fs.Name())
	return false, exitUsage
}

// versionFlag is a subcommand's --version, as Prometheus' exporters have
// it: the version is printed (on stderr, like -h) and the command ends.
type versionFlag bool

func (v *versionFlag) String() string   { return fmt.Sprint(bool(*v)) }
func (v *versionFlag) IsBoolFlag() bool { return true }

// Set notes the flag; parseFlags prints the version once parsing is done.
func (v *versionFlag) Set(s string) error {
	b, err := strconv.ParseBool(s)
	*v = versionFlag(b)
	return err
}

// registerVersion defines --version on a subcommand's flags (not
// simulate's: the CLI it stands in for has a --version of its own).
func registerVersion(fs *flag.FlagSet) {
	fs.Var(new(versionFlag), "version", "print the version and exit")
}

// versionAsked reports whether --version was given.
func versionAsked(fs *flag.FlagSet) bool {
	f := fs.Lookup("version")
	if f == nil {
		return false
	}
	v, ok := f.Value.(*versionFlag)
	return ok && bool(*v)
}

// parseInterspersed is parseFlags for a subcommand whose arguments are
// operands (replay's files): flags may come before, between or after them,
// and "--" makes everything after it an operand. It returns the operands.
func parseInterspersed(fs *flag.FlagSet, args []string) (operands []string, ok bool, code int) {
	for {
		if ok, code := parseFlags(fs, args); !ok {
			return nil, false, code
		}
		rest := fs.Args()
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(operands, rest...), true, exitOK
		}
		if len(rest) == 0 {
			return operands, true, exitOK
		}
		operands, args = append(operands, rest[0]), rest[1:]
	}
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

// defaultLogFormat is the --log.format default.
const defaultLogFormat = "logfmt"

// registerLogFormat defines --log.format next to a command's --log.level.
func registerLogFormat(fs *flag.FlagSet, format *string) {
	*format = defaultLogFormat
	fs.StringVar(format, "log.format", defaultLogFormat, "format of cbc-otel's own messages on stderr: logfmt or json (one JSON object per line)")
}

func checkLogFormat(s string) error {
	if s != "logfmt" && s != "json" {
		return fmt.Errorf("--log.format must be logfmt or json, got %q", s)
	}
	return nil
}

// newLogger is cbc-otel's own logger on w (stderr), at a level and in a
// format (logfmt: slog's text handler; json: its JSON handler) validated
// beforehand by parseLogLevel and checkLogFormat. Not promslog (in
// prometheus/common, which go.mod has): its logfmt adds source= and
// reformats time, changing the lines users and tests already read; slog's
// handlers keep logfmt as it was and give JSON the same keys.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	l, _ := parseLogLevel(level)
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
