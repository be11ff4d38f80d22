package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/x509roots/fallback/bundle"
	"sigs.k8s.io/yaml"
)

// The image's fixed facts. The chart's templates run BinaryPath (the init
// container's `install`, the sidecar's `serve`), so it must not move.
const (
	BinaryPath = "/usr/local/bin/cbc-otel"
	CAPath     = "/etc/ssl/certs/ca-certificates.crt"
	// UID and GID are distroless's "nonroot": the chart's securityContext
	// runs as non-root, and 65532 is what Kubernetes users expect.
	UID = 65532
	GID = 65532
	// MetricsPort is the port of serve's default --web.listen-address
	// (127.0.0.1:9478): in a container it takes --web.listen-address
	// :9478, as the chart gives, to be reached on it.
	MetricsPort = "9478/tcp"
	// Source is the repository, for the org.opencontainers.image.source label.
	Source = "https://github.com/cbc-otel/cbc-otel"
)

// Spec is everything an image is made of. Two equal Specs (binary bytes
// included) give the same image digest: nothing else — clock, umask, host
// user, file order on disk — is read.
type Spec struct {
	Binary   []byte    // the static linux cbc-otel for Arch
	CACerts  []byte    // PEM bundle installed at CAPath
	Arch     string    // GOARCH: amd64, arm64
	Version  string    // `cbc-otel version`, and the version label
	Revision string    // the source commit, for the revision label ("" = none)
	Created  time.Time // every timestamp in the image (SOURCE_DATE_EPOCH)
}

// entry is one file or directory of the layer.
type entry struct {
	name     string // relative, no leading slash; directories end in "/"
	mode     int64
	uid, gid int
	body     []byte
}

// layerEntries lists the layer's contents, sorted, parents before children:
// the binary, the CA bundle, and the minimal /etc/passwd and /etc/group that
// let tools (and Go's os/user) name uid 65532. Everything is root-owned and
// read-only except the nonroot home and a sticky /tmp, as in distroless.
func layerEntries(s Spec) []entry {
	root := func(name string, mode int64, body []byte) entry {
		return entry{name: name, mode: mode, body: body}
	}
	es := []entry{
		root("etc/", 0o755, nil),
		root("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")),
		root("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")),
		root("etc/ssl/", 0o755, nil),
		root("etc/ssl/certs/", 0o755, nil),
		root(strings.TrimPrefix(CAPath, "/"), 0o644, s.CACerts),
		root("home/", 0o755, nil),
		{name: "home/nonroot/", mode: 0o700, uid: UID, gid: GID},
		root("tmp/", 0o1777, nil),
		root("usr/", 0o755, nil),
		root("usr/local/", 0o755, nil),
		root("usr/local/bin/", 0o755, nil),
		root(strings.TrimPrefix(BinaryPath, "/"), 0o755, s.Binary),
	}
	// Sorted by name, which puts every directory ("a/") before its
	// contents ("a/b"): the order is part of the layer's digest.
	sort.Slice(es, func(i, j int) bool { return es[i].name < es[j].name })
	return es
}

// layerTar writes the layer as an uncompressed tar with fixed metadata:
// mtime = created, no user or group names, no access or change times.
func layerTar(s Spec) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range layerEntries(s) {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: s.Created,
			// USTAR has no sub-second times, no atime/ctime, no PAX
			// records: the header is fixed by the fields above.
			Format: tar.FormatUSTAR,
		}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

// Labels returns the OCI annotations the image config carries.
func Labels(s Spec) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "cbc-otel",
		"org.opencontainers.image.description": "cbc-otel: OpenTelemetry traces and Prometheus metrics for AI-coding CLIs (wrapper, sidecar, installer)",
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.url":         Source,
		"org.opencontainers.image.version":     s.Version,
		"org.opencontainers.image.created":     s.Created.UTC().Format(time.RFC3339),
	}
	// No org.opencontainers.image.licenses: the repository states no
	// licence, and a label must not invent one.
	if s.Revision != "" {
		l["org.opencontainers.image.revision"] = s.Revision
	}
	return l
}

// Build assembles the image from no base: one layer and a config. Its
// manifest uses Docker schema 2 media types, the ones go-containerregistry
// gives an image read back from a `docker load` tarball: so the digest Build
// returns is the digest `crane push` of that tarball produces.
func Build(s Spec) (v1.Image, error) {
	if len(s.Binary) == 0 {
		return nil, errors.New("image: no binary")
	}
	if len(s.CACerts) == 0 {
		return nil, errors.New("image: no CA certificates")
	}
	if s.Arch == "" || s.Version == "" {
		return nil, errors.New("image: architecture and version are required")
	}
	raw, err := layerTar(s)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("image: layer: %w", err)
	}
	created := v1.Time{Time: s.Created.UTC()}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "tools/image (go-containerregistry, no base image)",
			Comment:   BinaryPath + ", CA certificates, nonroot user",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = s.Arch
	cf.OS = "linux"
	cf.Created = created
	cf.Config = v1.Config{
		User:         strconv.Itoa(UID) + ":" + strconv.Itoa(GID),
		Entrypoint:   []string{BinaryPath},
		Env:          []string{"PATH=/usr/local/bin"},
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{MetricsPort: {}},
		Labels:       Labels(s),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	return img, nil
}

// PinnedCACerts returns the Mozilla NSS roots of the pinned
// golang.org/x/crypto/x509roots/fallback module as a PEM bundle: the same
// bytes on every machine, unlike the build host's /etc/ssl/certs. Roots
// NSS constrains (distrust after a date) are left out: a PEM file cannot
// carry the constraint, and trusting them without it would trust them more
// than NSS does.
func PinnedCACerts() ([]byte, error) {
	var buf bytes.Buffer
	n := 0
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("CA bundle: the pinned NSS bundle is empty")
	}
	return buf.Bytes(), nil
}

// ReadCACerts reads a PEM bundle from file (-ca-certs), checking that every
// block is a parseable certificate and that there is at least one.
func ReadCACerts(file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	n, rest := 0, b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("CA bundle %s: a %q block, want CERTIFICATE", file, blk.Type)
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return nil, fmt.Errorf("CA bundle %s: certificate %d: %w", file, n+1, err)
		}
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("CA bundle %s: no PEM certificate in it", file)
	}
	return b, nil
}

// ChartRef returns the image reference the chart in chartDir defaults to:
// values.yaml's image.repository, tagged with image.tag or, when that is
// empty, Chart.yaml's appVersion (the templates' cbc-otel.image helper).
func ChartRef(chartDir string) (string, error) {
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	for _, f := range []struct {
		name string
		v    any
	}{{"Chart.yaml", &chart}, {"values.yaml", &values}} {
		b, err := os.ReadFile(filepath.Join(chartDir, f.name))
		if err != nil {
			return "", fmt.Errorf("chart: %w", err)
		}
		if err := yaml.Unmarshal(b, f.v); err != nil {
			return "", fmt.Errorf("chart: %s: %w", f.name, err)
		}
	}
	tag := values.Image.Tag
	if tag == "" {
		tag = chart.AppVersion
	}
	if values.Image.Repository == "" || tag == "" {
		return "", fmt.Errorf("chart %s: no image.repository, or neither image.tag nor appVersion", chartDir)
	}
	return values.Image.Repository + ":" + tag, nil
}
