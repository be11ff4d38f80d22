// Package testbin builds the cbc-otel binary for the tests that run it
// (the face's binary tests, chaos, helm, e2e) and for the bench harness,
// which builds baseline revisions the same way. Written once, so every
// caller finds the module root alike, whatever its working directory.
//
// It is internal because it is test support shared by this module's
// packages, not API.
package testbin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Main is the package path of the command, relative to the module root.
const Main = "./cmd/cbc-otel"

type config struct {
	dir     string
	pkg     string
	trim    bool
	race    bool
	noVCS   bool
	ldflags string
	env     []string
}

// Option changes how Build builds.
type Option func(*config)

// Dir builds in the module rooted at dir (e.g. a baseline revision's
// source tree), not the one holding the working directory.
func Dir(dir string) Option { return func(c *config) { c.dir = dir } }

// Package builds pkg (relative to the module root) instead of Main.
func Package(pkg string) Option { return func(c *config) { c.pkg = pkg } }

// Trimpath builds with -trimpath, as a release is built.
func Trimpath() Option { return func(c *config) { c.trim = true } }

// NoVCS builds with -buildvcs=false, as tools/image builds the image's
// binary, so a test can compare its own build with the image's.
func NoVCS() Option { return func(c *config) { c.noVCS = true } }

// Race builds with the race detector.
func Race() Option { return func(c *config) { c.race = true } }

// LDFlags passes flags to the linker, e.g. "-X main.version=v1".
func LDFlags(flags string) Option { return func(c *config) { c.ldflags = flags } }

// Env adds KEY=value pairs to the build's environment, e.g.
// "CGO_ENABLED=0"; later pairs win.
func Env(kv ...string) Option { return func(c *config) { c.env = append(c.env, kv...) } }

// args is the go command's arguments for a build to out.
func (c *config) args(out string) []string {
	args := []string{"build", "-o", out}
	if c.trim {
		args = append(args, "-trimpath")
	}
	if c.noVCS {
		args = append(args, "-buildvcs=false")
	}
	if c.race {
		args = append(args, "-race")
	}
	if c.ldflags != "" {
		args = append(args, "-ldflags", c.ldflags)
	}
	return append(args, c.pkg)
}

// ModuleRoot returns the directory of the go.mod that governs dir ("" for
// the working directory), as `go env GOMOD` reports it.
func ModuleRoot(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", "GOMOD")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	// Outside a module go reports os.DevNull (or nothing with GO111MODULE=off).
	if mod == "" || mod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside a module")
	}
	return filepath.Dir(mod), nil
}

// Build builds the binary to out (".exe" is added on Windows when out has
// no extension) and returns its path. Errors carry the compiler's output.
func Build(ctx context.Context, out string, opts ...Option) (string, error) {
	c := config{pkg: Main}
	for _, o := range opts {
		o(&c)
	}
	root, err := ModuleRoot(ctx, c.dir)
	if err != nil {
		return "", err
	}
	if runtime.GOOS == "windows" && filepath.Ext(out) == "" {
		out += ".exe"
	}
	if out, err = filepath.Abs(out); err != nil {
		return "", fmt.Errorf("building %s: %w", c.pkg, err)
	}
	cmd := exec.CommandContext(ctx, "go", c.args(out)...)
	cmd.Dir = root
	if len(c.env) > 0 {
		cmd.Env = append(os.Environ(), c.env...)
	}
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(cmd.Args[1:], " "), root, err, log.Bytes())
	}
	return out, nil
}
