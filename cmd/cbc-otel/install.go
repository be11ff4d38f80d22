package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// cmdInstall copies this binary into DIR as DIR/cbc-otel. The Helm chart's
// init container runs it to put cbc-otel into an emptyDir that the CLI's
// container runs `cbc-otel run` from, so the CLI's image needs nothing of
// ours; the image is distroless (no shell, no cp), hence a subcommand.
func cmdInstall(_ context.Context, args []string, sio stdio) int {
	fs := newFlagSet("install", "usage: cbc-otel install DIR\n\nCopies this binary to DIR/cbc-otel (atomically, mode 0755).\n", sio.err)
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		return fail(sio.err, "install", exitUsage, errors.New("need exactly one DIR (see 'cbc-otel install -h')"))
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel install: %v\n", err)
		return exitFailure
	}
	dst, err := installBinary(self, fs.Arg(0))
	if err != nil {
		fmt.Fprintf(sio.err, "cbc-otel install: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(sio.err, "cbc-otel install: installed %s\n", dst)
	return exitOK
}

// installBinary copies src to dir/cbc-otel through a synced temporary file
// renamed into place, so that a reader never runs a partial binary.
func installBinary(src, dir string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, ".cbc-otel-install-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", err
	}
	if err := errors.Join(tmp.Chmod(0o755), tmp.Sync()); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "cbc-otel")
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	return dst, nil
}
