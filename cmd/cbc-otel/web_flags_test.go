package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// The exporter-convention flags are refused, one line each, when wrong.
func TestWebFlagsUsageErrors(t *testing.T) {
	follow := filepath.Join(t.TempDir(), "*")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--web.telemetry-path", "metrics", "--", "true"}, `--web.telemetry-path "metrics": must start with /`},
		{[]string{"demo", "--web.telemetry-path", "/"}, "must not be /, /healthz or /readyz"},
		{[]string{"serve", "--follow.glob", follow, "--web.telemetry-path", "/healthz"}, "must not be /, /healthz or /readyz"},
		{[]string{"serve", "--follow.glob", follow, "--web.telemetry-path", "/readyz"}, "must not be /, /healthz or /readyz"},
		{[]string{"serve", "--follow.glob", follow, "--web.telemetry-path", "/debug/pprof/m"}, "must not be under /debug/pprof"},
		{[]string{"run", "--web.max-requests", "-1", "--", "true"}, "--web.max-requests -1: must not be negative"},
		{[]string{"run", "--web.listen-address=", "--web.systemd-socket", "--", "true"}, "--web.systemd-socket needs a --web.listen-address"},
		{[]string{"run", "--log.format", "xml", "--", "true"}, `--log.format must be logfmt or json, got "xml"`},
		{[]string{"demo", "--log.format", "text"}, "--log.format"},
		{[]string{"replay", "--log.format", "JSON", "-"}, "--log.format"},
		{[]string{"serve", "--follow.glob", follow, "--log.format", "yaml"}, "--log.format"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := realMain(context.Background(), tc.args, stdio{in: strings.NewReader(""), out: &out, err: &errb})
			msg := strings.TrimSuffix(errb.String(), "\n")
			if code != exitUsage || strings.Contains(msg, "\n") || !strings.Contains(msg, tc.want) {
				t.Errorf("exit %d, stderr %q: want %d and one line with %q", code, errb.String(), exitUsage, tc.want)
			}
		})
	}
}

// TestE2ESystemdSocketAndJSONLogs: serve with --web.systemd-socket serves
// on the socket it was passed (LISTEN_FDS=1, fd 3; LISTEN_PID set by the
// shell that execs it, so it is serve's own pid), binding no port of its
// own; with --log.format json every stderr line is a JSON object.
func TestE2ESystemdSocketAndJSONLogs(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("socket activation is Linux only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := ln.Addr().String()
	s := &served{addr: addr, stderr: new(oteltest.SyncBuffer), exited: make(chan struct{})}
	// The listen address is a port nobody serves: only the socket answers.
	unused := freeAddr(t)
	s.cmd = exec.Command("sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$@"`, "sh", wrapperBin, "serve",
		"--follow.glob", filepath.Join(t.TempDir(), "*"), "--web.listen-address", unused, "--web.systemd-socket", "--log.format", "json")
	s.cmd.ExtraFiles = []*os.File{f}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		fam, err := s.metric("cbc_otel_build_info", "")
		if err == nil && len(fam) > 0 {
			break
		}
		if time.Now().After(deadline) {
			s.cmd.Process.Kill()
			<-s.exited
			t.Fatalf("no metrics on the passed socket: %v\n%s", err, s.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c, err := net.DialTimeout("tcp", unused, time.Second); err == nil {
		c.Close()
		t.Errorf("serve bound --web.listen-address %s besides the passed socket", unused)
	}
	if code := s.stop(t); code != exitOK {
		t.Errorf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(s.stderr.String()), "\n")
	if len(lines) < 2 {
		t.Fatalf("stderr: %q, want serve's info lines", s.stderr.String())
	}
	for _, l := range lines {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil || v["msg"] == nil || v["level"] == nil {
			t.Errorf("not a JSON log line: %q (%v)", l, err)
		}
	}
}

// TestE2EServeSIGHUP: SIGHUP neither stops serve nor costs anything: it is
// logged (nothing is reloadable) and serve then stops on SIGTERM as ever.
func TestE2EServeSIGHUP(t *testing.T) {
	s := startServed(t, "--follow.glob", filepath.Join(t.TempDir(), "*"))
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(s.stderr.String(), "following") {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.cmd.Process.Signal(syscall.SIGHUP)
	for !strings.Contains(s.stderr.String(), "SIGHUP: nothing to reload") {
		select {
		case <-s.exited:
			t.Fatalf("serve exited on SIGHUP:\n%s", s.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP not logged:\n%s", s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := s.metric("cbc_otel_build_info", ""); err != nil {
		t.Errorf("metrics after SIGHUP: %v", err)
	}
	if code := s.stop(t); code != exitOK {
		t.Errorf("exit %d after SIGTERM", code)
	}
}
