package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/exposition"
	"github.com/cbc-otel/cbc-otel/internal/realtool"

	"github.com/cbc-otel/cbc-otel/internal/oteltest"
)

// tcpListen is TCP_LISTEN in the st column of /proc/net/tcp.
const tcpListen = "0A"

// listeners are the TCP addresses process pid listens on: the socket
// descriptors in /proc/PID/fd, looked up in /proc/PID/net/tcp and tcp6
// (those tables list every socket of the process's network namespace; its
// descriptors say which are its own).
func listeners(pid int) ([]netip.AddrPort, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	own := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			own[strings.TrimSuffix(ino, "]")] = true
		}
	}
	var out []netip.AddrPort
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 || fl[3] != tcpListen || !own[fl[9]] {
				continue
			}
			ap, err := procAddr(fl[1])
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %q: %w", table, fl[1], err)
			}
			out = append(out, ap)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// procAddr reads an address of /proc/net/tcp*: the IP as 32-bit words in
// host byte order, each %08X, then ":" and the port, %04X.
func procAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(h)
	if !ok || err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, errors.New("not hex address:port")
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ip := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), uint16(port)), nil
}

func TestProcAddr(t *testing.T) {
	le := binary.NativeEndian.Uint32([]byte{1, 2, 3, 4}) == binary.LittleEndian.Uint32([]byte{1, 2, 3, 4})
	if !le {
		t.Skip("the rows below are a little-endian machine's")
	}
	for in, want := range map[string]string{
		"0100007F:2506":                         "127.0.0.1:9478",
		"00000000:0050":                         "0.0.0.0:80",
		"00000000000000000000000000000000:2506": "[::]:9478",
		"00000000000000000000000001000000:1F90": "[::1]:8080",
		"0000000000000000FFFF00000100007F:0016": "127.0.0.1:22",
	} {
		got, err := procAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("procAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}

// TestListenDefaults: run serves nothing unless asked, spooling or not;
// demo and serve serve on loopback; a flag exposes them.
func TestListenDefaults(t *testing.T) {
	if ap := netip.MustParseAddrPort(exposition.DefaultAddr); !ap.Addr().IsLoopback() || ap.Port() != 9478 {
		t.Errorf("exposition.DefaultAddr %s: want loopback, port 9478", exposition.DefaultAddr)
	}
	spool := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--", "true"}, ""},
		{[]string{"run", "--spool.dir", spool, "--", "true"}, ""},
		{[]string{"run", "--spool.dir", spool, "--spool.process", "--", "true"}, ""},
		{[]string{"run", "--web.listen-address", ":9478", "--", "true"}, ":9478"},
		{[]string{"demo"}, exposition.DefaultAddr},
		{[]string{"demo", "--web.listen-address", "0.0.0.0:9478"}, "0.0.0.0:9478"},
		{[]string{"serve", "--spool.dir", spool}, exposition.DefaultAddr},
		{[]string{"serve", "--spool.dir", spool, "--web.listen-address", ""}, ""},
	} {
		var got string
		var ok bool
		var stderr bytes.Buffer
		switch tc.args[0] {
		case "run":
			var c runConfig
			c, ok, _ = parseRunArgs(tc.args[1:], &stderr)
			got = c.tel.ListenAddress()
		case "demo":
			var c demoConfig
			c, ok, _ = parseDemoArgs(tc.args[1:], &stderr)
			got = c.tel.ListenAddress()
		case "serve":
			var c serveConfig
			c, ok, _ = parseServeArgs(tc.args[1:], &stderr)
			got = c.tel.ListenAddress()
		}
		if !ok || got != tc.want {
			t.Errorf("%q: --web.listen-address %q (ok %v, %s), want %q", tc.args, got, ok, stderr.String(), tc.want)
		}
	}
}

// netnsAttr runs a child in network (and user) namespaces of its own, so
// that a command binding its fixed default port (127.0.0.1:9478) cannot
// meet another process on the host holding it.
func netnsAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}},
	}
}

// TestListenersStayOnLoopback is the listener check of issue 29: after
// start (every listener a command opens is open before its child runs or
// before it says it follows), each command with its default addresses
// listens on nothing beyond 127.0.0.1, and `run` on nothing at all; only
// a flag exposes a port (the last case, which also shows the check sees
// an exposed one).
func TestListenersStayOnLoopback(t *testing.T) {
	def := exposition.DefaultAddr
	child := []string{"--", "sh", "-c", "echo ready; exec cat"} // up until its stdin closes
	for _, tc := range []struct {
		name  string
		args  []string
		ready string // what stdout or stderr says once it runs
		netns bool   // binds the fixed default port
		want  []string
	}{
		{"run", append([]string{"run"}, child...), "ready", false, nil},
		{"run, the SDK recipe", append([]string{"run", "--spool.dir", t.TempDir()}, child...), "ready", false, nil},
		{"run, telemetry outputs", append([]string{"run", "--metrics.file", filepath.Join(t.TempDir(), "m.prom"), "--summary.waterfall", "--otlp.endpoint", "http://127.0.0.1:1"}, child...), "ready", false, nil},
		{"run, CLI telemetry joined", append([]string{"run", "--cli-telemetry.join"}, child...), "ready", false, []string{"127.0.0.1:*"}},
		{"run, a loopback endpoint asked for", append([]string{"run", "--web.listen-address", "127.0.0.1:0"}, child...), "ready", false, []string{"127.0.0.1:*"}},
		{"demo", []string{"demo", "--live", "--simulate.speed", "0", "--pace", "50ms"}, "cbc-otel demo: running", true, []string{def}},
		{"serve", []string{"serve", "--spool.dir", t.TempDir()}, "msg=following", true, []string{def}},
		{"run, every interface asked for", append([]string{"run", "--web.listen-address", ":0"}, child...), "ready", false, []string{"[::]:*"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out oteltest.SyncBuffer
			start := func(attr *syscall.SysProcAttr) (*exec.Cmd, io.WriteCloser, error) {
				cmd := exec.Command(wrapperBin, tc.args...)
				cmd.SysProcAttr = attr
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdout, cmd.Stderr = &out, &out
				return cmd, stdin, cmd.Start()
			}
			var attr *syscall.SysProcAttr
			if tc.netns {
				attr = netnsAttr()
			}
			cmd, stdin, err := start(attr)
			if err != nil && tc.netns {
				// No namespaces here (a container's seccomp, a sysctl): the
				// host's loopback will do while the port is free.
				l, lerr := net.Listen("tcp", def)
				if lerr != nil {
					realtool.Missing(t, "network namespaces", fmt.Sprintf("starting %s in namespaces of its own: %v; and %s is taken on the host: %v", tc.args[0], err, def, lerr))
				}
				l.Close()
				t.Logf("no network namespace (%v): on the host's loopback", err)
				cmd, stdin, err = start(nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				stdin.Close() // run: its child's end
				if tc.args[0] != "run" {
					cmd.Process.Signal(syscall.SIGTERM)
				}
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("%s: %v\n%s", tc.name, err, out.String())
					}
				case <-time.After(20 * time.Second):
					cmd.Process.Kill()
					<-done
					t.Errorf("%s did not stop on SIGTERM", tc.name)
				}
			}()
			poll(t, 20*time.Second, tc.name+" started", func() (bool, string) {
				return strings.Contains(out.String(), tc.ready), out.String()
			})
			ls, err := listeners(cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range ls {
				got = append(got, l.String())
			}
			ok := len(got) == len(tc.want)
			for i := 0; ok && i < len(got); i++ {
				// host:* is any port of host
				if pre, any := strings.CutSuffix(tc.want[i], "*"); any {
					ok = strings.HasPrefix(got[i], pre)
				} else {
					ok = got[i] == tc.want[i]
				}
			}
			if !ok {
				t.Errorf("%s listens on %v, want %v; output:\n%s", tc.name, got, tc.want, out.String())
			}
			for _, l := range ls {
				if l.Addr().IsLoopback() == slices.Contains(tc.args, ":0") {
					t.Errorf("%s: listener %v: loopback %v", tc.name, l, l.Addr().IsLoopback())
				}
			}
		})
	}
}
