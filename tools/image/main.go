// Command image builds the cbc-otel container image without a Docker engine
// and without a base image: go-containerregistry (pinned in this module's
// go.mod) assembles one layer — the static binary at /usr/local/bin/cbc-otel,
// a pinned CA bundle, /etc/passwd and /etc/group naming the nonroot user
// 65532 — and a config (user 65532:65532, the binary as entrypoint, OCI
// labels), and writes it as a tarball that `docker load`, `podman load` and
// `kind load image-archive` accept, tagged with the reference the Helm
// chart defaults to. It prints that reference with the image's digest.
// Given several architectures (-arch amd64,arm64) it builds one image per
// architecture, ties them in a multi-arch index and writes that as an OCI
// image layout tarball instead (a docker-archive cannot hold an index).
//
// Reproducible: the same source, Go toolchain, flags and SOURCE_DATE_EPOCH
// give the same digest (and the same tarball bytes). Every timestamp is
// SOURCE_DATE_EPOCH (0 when unset); entries are sorted, root-owned, with
// fixed modes; the CA bundle comes from a pinned module, not the host.
//
// A module of its own, like tools/helm and tools/jaeger, so that
// go-containerregistry stays out of the product's go.mod. `make image` runs
// it; from this directory:
//
//	go run . -src ../.. -o ../../bin/cbc-otel-image.tar -version v1.2.3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// options are the command line, parsed.
type options struct {
	src, out, version, revision, tag, caFile string
	arches                                   []string // one: an image; more: an index
	created                                  time.Time
}

// parse reads args and SOURCE_DATE_EPOCH (through getenv).
func parse(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.src, "src", "../..", "the cbc-otel repository (its root: go.mod, cmd/cbc-otel, deploy/helm/cbc-otel)")
	fs.StringVar(&o.out, "o", "", "the tarball to write (default SRC/bin/cbc-otel-image.tar, SRC/bin/cbc-otel-image-index.tar for an index)")
	arch := fs.String("arch", "amd64", "the image's architecture (GOARCH): amd64 or arm64; a comma-separated list (amd64,arm64) builds one image each and writes their index as an OCI archive")
	fs.StringVar(&o.version, "version", "dev", "the version stamped in the binary (-X main.version) and the version label")
	fs.StringVar(&o.revision, "revision", "", "the source commit, for the revision label")
	fs.StringVar(&o.tag, "tag", "", "the image reference to tag (default: the chart's, values.yaml image.repository : Chart.yaml appVersion)")
	fs.StringVar(&o.caFile, "ca-certs", "", "a PEM CA bundle to install instead of the pinned Mozilla NSS roots (e.g. /etc/ssl/certs/ca-certificates.crt)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, a := range strings.Split(*arch, ",") {
		switch {
		case a != "amd64" && a != "arm64":
			return o, fmt.Errorf("-arch %q: amd64, arm64, or both separated by a comma", *arch)
		case slices.Contains(o.arches, a):
			return o, fmt.Errorf("-arch %q: %s twice", *arch, a)
		}
		o.arches = append(o.arches, a)
	}
	// One order whatever the flag's: the index's digest and the image
	// manifest.json names (the first) do not depend on it.
	slices.Sort(o.arches)
	// The version goes into -ldflags, which splits at spaces and quotes.
	if o.version == "" || strings.ContainsAny(o.version, " \t\n'\"\\") {
		return o, fmt.Errorf("-version %q: want a non-empty word", o.version)
	}
	if o.out == "" {
		o.out = filepath.Join(o.src, "bin", "cbc-otel-image.tar")
		if len(o.arches) > 1 {
			o.out = filepath.Join(o.src, "bin", "cbc-otel-image-index.tar")
		}
	}
	created, err := sourceDate(getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return o, err
	}
	o.created = created
	return o, nil
}

// sourceDate is the reproducible-builds SOURCE_DATE_EPOCH: seconds since
// 1970, UTC; unset means 0, so that a plain build is reproducible too.
func sourceDate(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want a non-negative number of seconds", v)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// run builds the binary and the image for each architecture and writes
// the image's tarball, or with several the index's OCI archive.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parse(args, getenv, stderr)
	if err != nil {
		return err
	}
	ref := o.tag
	if ref == "" {
		if ref, err = ChartRef(filepath.Join(o.src, "deploy", "helm", "cbc-otel")); err != nil {
			return err
		}
	}
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	var ca []byte
	if o.caFile != "" {
		ca, err = ReadCACerts(o.caFile)
	} else {
		ca, err = PinnedCACerts()
	}
	if err != nil {
		return err
	}
	var imgs []v1.Image
	for _, arch := range o.arches {
		bin, err := buildBinary(ctx, o.src, arch, o.version, stderr)
		if err != nil {
			return err
		}
		img, err := Build(Spec{Binary: bin, CACerts: ca, Arch: arch, Version: o.version, Revision: o.revision, Created: o.created})
		if err != nil {
			return err
		}
		digest, err := img.Digest()
		if err != nil {
			return fmt.Errorf("image digest: %w", err)
		}
		imgs = append(imgs, img)
		if len(o.arches) == 1 {
			if err := writeTarball(o.out, tag, img); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s@%s linux/%s -> %s\n", tag.Name(), digest, arch, o.out)
			return nil
		}
		fmt.Fprintf(stdout, "%s@%s linux/%s\n", tag.Name(), digest, arch)
	}
	idx, err := Index(imgs)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("index digest: %w", err)
	}
	if err := writeIndexArchive(o.out, tag, idx, o.created); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s@%s index -> %s\n", tag.Name(), digest, o.out)
	return nil
}

// buildBinary builds cbc-otel as `make build` does (static, -trimpath,
// stripped, version stamped), for linux/arch, and returns its bytes. No VCS
// stamping: the revision goes in a label, and the binary depends on the
// source and version alone.
func buildBinary(ctx context.Context, src, arch, version string, stderr io.Writer) ([]byte, error) {
	dir, err := os.MkdirTemp("", "cbc-otel-image-")
	if err != nil {
		return nil, fmt.Errorf("building cbc-otel: %w", err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "cbc-otel")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+version, "-o", out, "./cmd/cbc-otel")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building cbc-otel in %s for linux/%s: %w", src, arch, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("building cbc-otel: %w", err)
	}
	return b, nil
}

// writeTarball writes img as a `docker load` tarball tagged tag, through a
// temporary file renamed into place: a failed run leaves no truncated
// tarball behind.
func writeTarball(out string, tag name.Tag, img v1.Image) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("writing the image: %w", err)
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing the image to %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing the image: %w", err)
	}
	return nil
}
