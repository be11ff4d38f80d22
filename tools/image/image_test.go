package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// These tests cover the tool's parts. The whole `make image` path — the
// real binary built, the tarball opened without go-containerregistry, the
// binary run from the layer, the tag compared with the chart — is
// deploy/helm/image_test.go in the main module, which also runs these.

// testSpec is a small valid Spec.
func testSpec(t *testing.T) Spec {
	t.Helper()
	ca, err := PinnedCACerts()
	if err != nil {
		t.Fatal(err)
	}
	return Spec{
		Binary:   []byte("\x7fELF not really"),
		CACerts:  ca,
		Arch:     "amd64",
		Version:  "v1.2.3",
		Revision: "0123456789abcdef0123456789abcdef01234567",
		Created:  time.Unix(1700000000, 0).UTC(),
	}
}

func digest(t *testing.T, s Spec) v1.Hash {
	t.Helper()
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestBuildReproducible: the digest depends on the Spec alone — equal Specs
// give equal digests — and on every field of it.
func TestBuildReproducible(t *testing.T) {
	base := digest(t, testSpec(t))
	if again := digest(t, testSpec(t)); again != base {
		t.Fatalf("same spec, different digests: %s, %s", base, again)
	}
	for _, tc := range []struct {
		name   string
		change func(*Spec)
	}{
		{"binary", func(s *Spec) { s.Binary = append(s.Binary, 0) }},
		{"ca certs", func(s *Spec) { s.CACerts = s.CACerts[:len(s.CACerts)/2] }},
		{"arch", func(s *Spec) { s.Arch = "arm64" }},
		{"version", func(s *Spec) { s.Version = "v1.2.4" }},
		{"revision", func(s *Spec) { s.Revision = "" }},
		{"created", func(s *Spec) { s.Created = s.Created.Add(time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec(t)
			tc.change(&s)
			if d := digest(t, s); d == base {
				t.Errorf("changing the %s left the digest %s", tc.name, d)
			}
		})
	}
}

// TestBuildRejects: an incomplete Spec is an error, not an image.
func TestBuildRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Spec)
	}{
		{"no binary", func(s *Spec) { s.Binary = nil }},
		{"no ca certs", func(s *Spec) { s.CACerts = nil }},
		{"no arch", func(s *Spec) { s.Arch = "" }},
		{"no version", func(s *Spec) { s.Version = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec(t)
			tc.change(&s)
			if _, err := Build(s); err == nil {
				t.Error("Build succeeded")
			}
		})
	}
}

// TestLayerEntries: sorted, parents first, root-owned and read-only but for
// the nonroot home and /tmp.
func TestLayerEntries(t *testing.T) {
	es := layerEntries(testSpec(t))
	seen := map[string]bool{}
	for i, e := range es {
		if i > 0 && es[i-1].name >= e.name {
			t.Errorf("entry %q after %q: not sorted", e.name, es[i-1].name)
		}
		if dir := filepath.Dir(strings.TrimSuffix(e.name, "/")); dir != "." && !seen[dir+"/"] {
			t.Errorf("entry %q comes before its directory %q", e.name, dir+"/")
		}
		seen[e.name] = true
	}
	for _, tc := range []struct {
		name     string
		mode     int64
		uid, gid int
	}{
		{"etc/passwd", 0o644, 0, 0},
		{"etc/group", 0o644, 0, 0},
		{"etc/ssl/certs/ca-certificates.crt", 0o644, 0, 0},
		{"home/nonroot/", 0o700, UID, GID},
		{"tmp/", 0o1777, 0, 0},
		{"usr/local/bin/", 0o755, 0, 0},
		{"usr/local/bin/cbc-otel", 0o755, 0, 0},
	} {
		found := false
		for _, e := range es {
			if e.name == tc.name {
				found = true
				if e.mode != tc.mode || e.uid != tc.uid || e.gid != tc.gid {
					t.Errorf("%s: mode %o uid %d gid %d, want %o %d %d", tc.name, e.mode, e.uid, e.gid, tc.mode, tc.uid, tc.gid)
				}
			}
		}
		if !found {
			t.Errorf("no %s in the layer", tc.name)
		}
	}
}

// TestPushedDigest: the digest Build reports is the one the tarball gives
// when read back (as `crane push` reads it) and the one a registry stores.
func TestPushedDigest(t *testing.T) {
	img, err := Build(testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("example.com/cbc-otel:v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "img.tar")
	if err := writeTarball(file, tag, img); err != nil {
		t.Fatal(err)
	}
	loaded, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := loaded.Digest(); err != nil || got != want {
		t.Fatalf("tarball read back: digest %s (%v), want %s", got, err, want)
	}

	pushed := testRegistryTag(t)
	if err := remote.Write(pushed, loaded); err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(pushed)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want {
		t.Errorf("registry: digest %s, want %s", desc.Digest, want)
	}
}

// testRegistryTag starts an in-memory registry for the test and returns a
// tag in it.
func testRegistryTag(t *testing.T) name.Tag {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	tag, err := name.NewTag(strings.TrimPrefix(srv.URL, "http://")+"/cbc-otel:v1.2.3", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// TestPinnedCACerts: every root NSS trusts without a constraint, as
// parseable PEM, and nothing else.
func TestPinnedCACerts(t *testing.T) {
	pemBytes, err := PinnedCACerts()
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for r := range bundle.Roots() {
		if r.Constraint == nil {
			want++
		}
	}
	got := 0
	for rest := pemBytes; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			t.Fatalf("certificate %d: %v", got+1, err)
		}
		got++
	}
	if got != want || got < 100 {
		t.Errorf("%d certificates, want the %d unconstrained NSS roots (and at least 100)", got, want)
	}
}

// TestReadCACerts: -ca-certs takes a PEM bundle of certificates only.
func TestReadCACerts(t *testing.T) {
	good, err := PinnedCACerts()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		content []byte // nil: no file
		ok      bool
	}{
		{"bundle", good, true},
		{"missing", nil, false},
		{"empty", []byte{}, false},
		{"not pem", []byte("hello\n"), false},
		{"a key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}), false},
		{"bad certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "ca.crt")
			if tc.content != nil {
				if err := os.WriteFile(file, tc.content, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := ReadCACerts(file)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && !bytes.Equal(b, tc.content) {
				t.Error("the bundle was not returned as read")
			}
		})
	}
}

// TestChartRef: repository:tag, the tag defaulting to appVersion, as the
// chart's cbc-otel.image helper does.
func TestChartRef(t *testing.T) {
	for _, tc := range []struct {
		name, chart, values, want string
	}{
		{"appVersion", "appVersion: \"0.1.0\"\n", "image:\n  repository: ghcr.io/x/y\n  tag: \"\"\n", "ghcr.io/x/y:0.1.0"},
		{"tag", "appVersion: 0.1.0\n", "image:\n  repository: ghcr.io/x/y\n  tag: v9\n", "ghcr.io/x/y:v9"},
		{"no repository", "appVersion: 0.1.0\n", "image:\n  tag: v9\n", ""},
		{"no version", "name: x\n", "image:\n  repository: ghcr.io/x/y\n", ""},
		{"bad yaml", "appVersion: [\n", "image: {}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for f, c := range map[string]string{"Chart.yaml": tc.chart, "values.yaml": tc.values} {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ChartRef(dir)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestParse: flags, defaults and SOURCE_DATE_EPOCH.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		epoch string
		ok    bool
		check func(options) bool
	}{
		{"defaults", nil, "", true, func(o options) bool {
			return slices.Equal(o.arches, []string{"amd64"}) && o.version == "dev" && o.created.Equal(time.Unix(0, 0)) &&
				o.out == filepath.Join("../..", "bin", "cbc-otel-image.tar")
		}},
		{"epoch", nil, "1700000000", true, func(o options) bool { return o.created.Equal(time.Unix(1700000000, 0)) }},
		{"arm64", []string{"-arch", "arm64", "-o", "x.tar"}, "", true, func(o options) bool { return slices.Equal(o.arches, []string{"arm64"}) && o.out == "x.tar" }},
		{"index", []string{"-arch", "arm64,amd64"}, "", true, func(o options) bool {
			return slices.Equal(o.arches, []string{"amd64", "arm64"}) && o.out == filepath.Join("../..", "bin", "cbc-otel-image-index.tar")
		}},
		{"index out", []string{"-arch", "amd64,arm64", "-o", "i.tar"}, "", true, func(o options) bool { return o.out == "i.tar" }},
		{"arch twice", []string{"-arch", "amd64,amd64"}, "", false, nil},
		{"empty arch in list", []string{"-arch", "amd64,"}, "", false, nil},
		{"bad arch in list", []string{"-arch", "amd64,386"}, "", false, nil},
		{"bad epoch", nil, "yesterday", false, nil},
		{"negative epoch", nil, "-1", false, nil},
		{"bad arch", []string{"-arch", "386"}, "", false, nil},
		{"spaced version", []string{"-version", "1 2"}, "", false, nil},
		{"empty version", []string{"-version", ""}, "", false, nil},
		{"extra argument", []string{"now"}, "", false, nil},
		{"unknown flag", []string{"-push"}, "", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := func(k string) string {
				if k == "SOURCE_DATE_EPOCH" {
					return tc.epoch
				}
				return ""
			}
			o, err := parse(tc.args, env, io.Discard)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && !tc.check(o) {
				t.Errorf("options %+v", o)
			}
		})
	}
}
