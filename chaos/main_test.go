//go:build chaos

package chaos

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"

	"github.com/cbc-otel/cbc-otel/internal/testbin"
	"github.com/cbc-otel/cbc-otel/supervise/supervisetest"
)

// Built once per run by TestMain.
var (
	// wrapperBin is the cbc-otel binary under attack, built the way it is
	// released (CGO off, trimmed), not with -race: RSS and throughput
	// figures must be those of the real binary.
	wrapperBin string
	// testExe is this test binary; with supervisetest.Env(mode) it is a
	// fake child (helper-process pattern).
	testExe string
	// repoRoot is the module root (for go run of repo tools).
	repoRoot string
)

// The sections of the table, in the order of issue #10.
const (
	SecPassthrough = "1 passthrough"
	SecBackend     = "2 backend faults"
	SecProcess     = "3 process faults"
	SecInput       = "4 bad input"
	SecSecrets     = "5 secrets"
	SecEndpoints   = "6 endpoints"
)

// figure is one measured value and the bound it is held to.
type figure struct {
	Section, Name, Value, Bound string
	OK                          bool
}

var table struct {
	sync.Mutex
	rows []figure
}

// record adds a figure to the suite's table; a figure outside its bound
// fails t, so a breach both fails the run and shows in the table.
func record(t testing.TB, section, name, value, bound string, ok bool) {
	t.Helper()
	table.Lock()
	table.rows = append(table.rows, figure{section, name, value, bound, ok})
	table.Unlock()
	if !ok {
		t.Errorf("BREACH [%s] %s = %s (bound: %s)", section, name, value, bound)
	} else {
		t.Logf("[%s] %s = %s (bound: %s)", section, name, value, bound)
	}
}

// loadFigures reads figures measured outside this binary (the fuzzing pass
// of run.sh): one per line, tab-separated section, name, value, bound,
// "ok" or "BREACH".
func loadFigures(path string) error {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Split(sc.Text(), "\t")
		if len(p) != 5 {
			continue
		}
		table.rows = append(table.rows, figure{p[0], p[1], p[2], p[3], p[4] == "ok"})
	}
	return sc.Err()
}

// appendFigures appends rows to path in the format loadFigures reads; tabs
// and newlines in a value become spaces.
func appendFigures(path string, rows []figure) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	clean := strings.NewReplacer("\t", " ", "\n", " ")
	for _, r := range rows {
		res := "ok"
		if !r.OK {
			res = "BREACH"
		}
		fmt.Fprintf(f, "%s\t%s\t%s\t%s\t%s\n", clean.Replace(r.Section), clean.Replace(r.Name), clean.Replace(r.Value), clean.Replace(r.Bound), res)
	}
	return f.Close()
}

// printTable writes the table, sorted by section (stable within one), as
// aligned text and, when md is not nil, as Markdown.
func printTable(w io.Writer, md io.Writer) (breaches int) {
	table.Lock()
	defer table.Unlock()
	rows := append([]figure(nil), table.rows...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Section < rows[j].Section })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SECTION\tFIGURE\tVALUE\tBOUND\tRESULT")
	if md != nil {
		fmt.Fprintln(md, "| section | figure | value | bound | result |")
		fmt.Fprintln(md, "|---|---|---|---|---|")
	}
	for _, r := range rows {
		res := "ok"
		if !r.OK {
			res = "BREACH"
			breaches++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Section, r.Name, r.Value, r.Bound, res)
		if md != nil {
			fmt.Fprintf(md, "| %s | %s | %s | %s | %s |\n", r.Section, mdCell(r.Name), mdCell(r.Value), mdCell(r.Bound), res)
		}
	}
	tw.Flush()
	return breaches
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// chaosChildren are fake children of the suite's own, beside those of
// supervisetest: a test file registers one in its init and starts it with
// childEnv(name).
var chaosChildren = map[string]func(args []string) int{}

// envChaosChild selects a chaosChildren entry in a re-run test binary.
const envChaosChild = "CBC_CHAOS_CHILD"

// childEnv is the environment that makes testExe behave as the chaos
// child name.
func childEnv(name string) []string {
	return append(os.Environ(), envChaosChild+"="+name)
}

func TestMain(m *testing.M) {
	if name := os.Getenv(envChaosChild); name != "" {
		run, ok := chaosChildren[name]
		if !ok {
			fmt.Fprintln(os.Stderr, "unknown chaos child", name)
			os.Exit(2)
		}
		os.Exit(run(os.Args[1:]))
	}
	if mode := supervisetest.Mode(); mode != "" {
		os.Exit(supervisetest.RunChild(mode, os.Args[1:]))
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cbc-otel-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = filepath.Dir(wd)
	wrapperBin = filepath.Join(dir, "cbc-otel")
	if _, err := testbin.Build(context.Background(), wrapperBin, testbin.Trimpath(), testbin.Env("CGO_ENABLED=0")); err != nil {
		fmt.Fprintln(os.Stderr, "building cbc-otel:", err)
		return 1
	}
	if testExe, err = os.Executable(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// CHAOS_FIGURES: rows measured elsewhere (the fuzzing pass, earlier
	// invocations of this binary), a list of files.
	for _, p := range filepath.SplitList(os.Getenv("CHAOS_FIGURES")) {
		if err := loadFigures(p); err != nil {
			fmt.Fprintln(os.Stderr, "reading", p, err)
			return 1
		}
	}
	loaded := len(table.rows)
	code := m.Run()

	// CHAOS_APPEND: this invocation's rows for a later one to print
	// (run.sh runs the suite in parts); CHAOS_QUIET: no table here.
	if p := os.Getenv("CHAOS_APPEND"); p != "" {
		if err := appendFigures(p, table.rows[loaded:]); err != nil {
			fmt.Fprintln(os.Stderr, "writing", p, err)
			return 1
		}
	}
	if os.Getenv("CHAOS_QUIET") != "" {
		for _, r := range table.rows[loaded:] {
			if !r.OK && code == 0 {
				code = 1
			}
		}
		return code
	}

	fmt.Printf("\n=== chaos figures (%s/%s, %d CPUs)\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	var md io.Writer
	if p := os.Getenv("CHAOS_REPORT"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		md = f
	}
	if n := printTable(os.Stdout, md); n > 0 {
		fmt.Printf("=== %d BREACH(ES)\n", n)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// syncBuffer is a bytes.Buffer safe for a process writing into it while the
// test polls it (a wrapper's stderr).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Bytes is a copy of what was written so far.
func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.b.Bytes())
}

// String is what was written so far.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// vmHWMKiB is the peak resident set of a running process in KiB, from
// /proc, 0 if unknown. It is the figure for a process's own peak: wait4's
// maxrss cannot serve, because os/exec starts children with vfork and exec
// folds the parent's (this test binary's) high-water mark into it.
func vmHWMKiB(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}
