package testbin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestModuleRoot(t *testing.T) {
	ctx := context.Background()
	root, err := ModuleRoot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	// This package sits two levels below the module root.
	wd, _ := os.Getwd()
	if want := filepath.Dir(filepath.Dir(wd)); root != want {
		t.Errorf("ModuleRoot = %q, want %q", root, want)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Error(err)
	}
	// From any directory of the module, the same root.
	if got, err := ModuleRoot(ctx, filepath.Join(root, "cmd")); err != nil || got != root {
		t.Errorf("ModuleRoot(cmd) = %q, %v; want %q", got, err, root)
	}
	if _, err := ModuleRoot(ctx, t.TempDir()); err == nil {
		t.Error("ModuleRoot outside a module: no error")
	}
}

// Each option becomes its go build flag, in one order, the package last.
func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{nil, "build -o B ./cmd/cbc-otel"},
		{[]Option{Trimpath(), NoVCS(), LDFlags("-s -w"), Env("CGO_ENABLED=0")}, "build -o B -trimpath -buildvcs=false -ldflags -s -w ./cmd/cbc-otel"},
		{[]Option{Race(), Package("./x"), Dir("/elsewhere")}, "build -o B -race ./x"},
	} {
		c := config{pkg: Main}
		for _, o := range tc.opts {
			o(&c)
		}
		if got := strings.Join(c.args("B"), " "); got != tc.want {
			t.Errorf("go %s, want go %s", got, tc.want)
		}
	}
}

// Each option reaches the binary: the linked version, the trimmed paths,
// the environment (CGO off) and the race detector, read back from the
// build info the binary carries.
func TestBuildOptions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary four times")
	}
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts []Option
		want []string // lines of `go version -m`
		not  []string
	}{
		{"plain", nil, []string{"path\tgithub.com/cbc-otel/cbc-otel/cmd/cbc-otel"}, []string{"-trimpath", "-race", "-ldflags"}},
		{"ldflags", []Option{LDFlags("-X main.version=v9.8.7-test")}, []string{"-ldflags=\"-X main.version=v9.8.7-test\""}, nil},
		{"trim, no cgo", []Option{Trimpath(), Env("CGO_ENABLED=0")}, []string{"-trimpath=true", "CGO_ENABLED=0"}, nil},
		{"race", []Option{Race()}, []string{"-race=true"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, err := Build(ctx, filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.CommandContext(ctx, "go", "version", "-m", bin).Output()
			if err != nil {
				t.Fatalf("go version -m: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("build info lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(string(out), n) {
					t.Errorf("build info has %q:\n%s", n, out)
				}
			}
		})
	}
}

// Dir builds another module tree (a baseline revision's source); a
// package that does not exist fails with the compiler's words.
func TestBuildDirAndErrors(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/tiny\n\ngo 1.22\n")
	write("main.go", "package main\n\nfunc main() { println(\"tiny\") }\n")
	bin, err := Build(ctx, filepath.Join(t.TempDir(), "tiny"), Dir(src), Package("."))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "tiny" {
		t.Errorf("built binary: %q, %v", out, err)
	}
	_, err = Build(ctx, filepath.Join(t.TempDir(), "x"), Dir(src), Package("./nowhere"))
	if err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("missing package: err = %v, want the compiler's message", err)
	}
}
