package helm_test

// The image `make image` builds (tools/image, a module of its own), checked
// from the main module so that `go test ./...` and `make test` cover it:
// TestImage builds it twice and opens the tarball with the standard library
// alone — as docker load would read it, not through the library that wrote
// it — and TestImageTool runs the tool module's own tests.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/cbc-otel/cbc-otel/internal/realtool"
)

const (
	imageVersion  = "v0.0.0-imagetest"
	imageRevision = "0123456789abcdef0123456789abcdef01234567"
	imageEpoch    = 1700000000
)

// imageTool returns the tools/image directory once its modules are there:
// fetching them needs the module proxy, whose absence is a skip (CI: a
// failure), like a missing real tool.
func imageTool(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "tools", "image")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		realtool.Missing(t, "go-containerregistry", fmt.Sprintf("go mod download in tools/image: %v (the module proxy must be reachable once)\n%s", err, out))
	}
	return dir
}

// TestImageTool runs tools/image's unit tests, which `go test ./...` at
// the root does not reach (another module).
func TestImageTool(t *testing.T) {
	dir := imageTool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "./..."}} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s in tools/image: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// buildImageTool builds tools/image into dir and returns the binary.
func buildImageTool(t *testing.T, dir string) string {
	t.Helper()
	tool := filepath.Join(dir, "image-tool")
	build := exec.Command("go", "build", "-o", tool, ".")
	build.Dir = imageTool(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building tools/image: %v\n%s", err, out)
	}
	return tool
}

// builtImage is one run of the tool: the digest it printed and the tarball.
type builtImage struct {
	digest string
	file   string
}

var printedDigest = regexp.MustCompile(`@(sha256:[0-9a-f]{64}) `)

// buildImage runs the tool binary as `make image` runs it, with fixed
// version, revision and SOURCE_DATE_EPOCH, and tmp as its TMPDIR.
func buildImage(t *testing.T, tool, out, tmp string) builtImage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, "-src="+repoRoot(t), "-o="+out, "-arch="+runtime.GOARCH,
		"-version="+imageVersion, "-revision="+imageRevision)
	cmd.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", imageEpoch), "TMPDIR="+tmp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tools/image: %v\n%s%s", err, stderr.String(), stdout.String())
	}
	m := printedDigest.FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("tools/image printed no digest: %q", stdout.String())
	}
	return builtImage{digest: m[1], file: out}
}

// dockerArchive is a `docker load` tarball, read with the standard library.
type dockerArchive struct {
	manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	files map[string][]byte
}

// readTarFiles returns the regular files of a tar archive by name.
func readTarFiles(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatalf("%s: %s: %v", file, h.Name, err)
		}
	}
}

func readArchive(t *testing.T, file string) dockerArchive {
	t.Helper()
	a := dockerArchive{files: readTarFiles(t, file)}
	if err := json.Unmarshal(a.files["manifest.json"], &a.manifest); err != nil {
		t.Fatalf("%s: manifest.json: %v", file, err)
	}
	if len(a.manifest) != 1 || len(a.manifest[0].Layers) != 1 {
		t.Fatalf("%s: manifest.json %s: want one image of one layer", file, a.files["manifest.json"])
	}
	return a
}

// imageConfig is the part of the image config checked here.
type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Created      string `json:"created"`
	Config       struct {
		User         string
		Entrypoint   []string
		Cmd          []string
		Env          []string
		Labels       map[string]string
		ExposedPorts map[string]struct{}
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// layerFile is one entry of the image's layer.
type layerFile struct {
	hdr  *tar.Header
	body []byte
}

// chartImageRef is the image the chart defaults to, read here without the
// tool's code: values.yaml image.repository, tagged image.tag or appVersion.
func chartImageRef(t *testing.T) string {
	t.Helper()
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct{ Repository, Tag string } `json:"image"`
	}
	for f, v := range map[string]any{"Chart.yaml": &chart, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(chartDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	tag := values.Image.Tag
	if tag == "" {
		tag = chart.AppVersion
	}
	return values.Image.Repository + ":" + tag
}

// TestImage builds the image twice (same inputs, different TMPDIR) and
// checks the digests and bytes are equal, the tag is the chart's default,
// the config (user, entrypoint, labels, architecture), the layer's files,
// and that the binary from the layer runs.
func TestImage(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("the image is built for amd64 and arm64, and this test runs its binary: not on %s", runtime.GOARCH)
	}
	work := t.TempDir()
	tool := buildImageTool(t, work)
	var runs []builtImage
	for _, n := range []string{"a", "b"} {
		tmp := filepath.Join(work, "tmp-"+n)
		if err := os.Mkdir(tmp, 0o700); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, buildImage(t, tool, filepath.Join(work, n+".tar"), tmp))
	}
	first := runs[0]
	t.Logf("image digest %s", first.digest)

	t.Run("reproducible", func(t *testing.T) {
		if runs[1].digest != first.digest {
			t.Errorf("two builds, two digests: %s, %s", first.digest, runs[1].digest)
		}
		var sums []string
		for _, r := range runs {
			b, err := os.ReadFile(r.file)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			sums = append(sums, hex.EncodeToString(sum[:]))
		}
		if sums[0] != sums[1] {
			t.Errorf("two builds, two tarballs: sha256 %s, %s", sums[0], sums[1])
		}
	})

	a := readArchive(t, first.file)
	m := a.manifest[0]
	want := chartImageRef(t)

	t.Run("tag is the chart's default", func(t *testing.T) {
		if !slices.Equal(m.RepoTags, []string{want}) {
			t.Errorf("tarball tags %q, want [%q] (values.yaml image.repository : Chart.yaml appVersion)", m.RepoTags, want)
		}
		// The rendered chart says the same: every image of the default
		// golden (init container, sidecar, smoke-test workload).
		golden, err := os.ReadFile(filepath.Join("testdata", "default.golden.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		images := regexp.MustCompile(`(?m)^\s*image: "?([^"\s]+)"?$`).FindAllStringSubmatch(string(golden), -1)
		if len(images) == 0 {
			t.Fatal("no image in testdata/default.golden.yaml")
		}
		for _, im := range images {
			if im[1] != want {
				t.Errorf("default.golden.yaml renders image %q, make image tags %q", im[1], want)
			}
		}
		// And `make image` runs the tool with its default tag, the one
		// checked above: no -tag of its own.
		if _, err := exec.LookPath("make"); err != nil {
			t.Skip("no make: the Makefile's image recipe is not checked")
		}
		dry := exec.Command("make", "-n", "image")
		dry.Dir = repoRoot(t)
		recipe, err := dry.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n image: %v\n%s", err, recipe)
		}
		if r := string(recipe); !strings.Contains(r, "cd tools/image") || strings.Contains(r, "-tag") {
			t.Errorf("make image does not run tools/image with the chart's tag:\n%s", r)
		}
	})

	cfgBytes := a.files[m.Config]
	var cfg imageConfig
	if err := json.Unmarshal(cfgBytes, &cfg); err != nil {
		t.Fatalf("config %s: %v", m.Config, err)
	}
	layerGz := a.files[m.Layers[0]]
	layerTar, files, order := readLayer(t, layerGz)

	t.Run("config", func(t *testing.T) {
		created := time.Unix(imageEpoch, 0).UTC().Format(time.RFC3339)
		for _, tc := range []struct {
			name      string
			got, want any
		}{
			{"architecture", cfg.Architecture, runtime.GOARCH},
			{"os", cfg.OS, "linux"},
			{"created", cfg.Created, created},
			{"user", cfg.Config.User, "65532:65532"},
			{"entrypoint", cfg.Config.Entrypoint, []string{"/usr/local/bin/cbc-otel"}},
			{"cmd", cfg.Config.Cmd, []string(nil)},
			{"env", cfg.Config.Env, []string{"PATH=/usr/local/bin"}},
			{"exposed ports", cfg.Config.ExposedPorts, map[string]struct{}{"9478/tcp": {}}},
			{"labels", cfg.Config.Labels, map[string]string{
				"org.opencontainers.image.title":       "cbc-otel",
				"org.opencontainers.image.description": "cbc-otel: OpenTelemetry traces and Prometheus metrics for AI-coding CLIs (wrapper, sidecar, installer)",
				"org.opencontainers.image.source":      "https://github.com/cbc-otel/cbc-otel",
				"org.opencontainers.image.url":         "https://github.com/cbc-otel/cbc-otel",
				"org.opencontainers.image.version":     imageVersion,
				"org.opencontainers.image.revision":    imageRevision,
				"org.opencontainers.image.created":     created,
			}},
		} {
			if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
				t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
			}
		}
	})

	t.Run("content addressed", func(t *testing.T) {
		for _, tc := range []struct {
			name, ref string
			data      []byte
		}{
			{"config", m.Config, cfgBytes},
			{"layer", m.Layers[0], layerGz},
			{"diff_id", strings.Join(cfg.RootFS.DiffIDs, ","), layerTar},
		} {
			sum := sha256.Sum256(tc.data)
			if h := hex.EncodeToString(sum[:]); !strings.Contains(tc.ref, h) {
				t.Errorf("%s %q does not name its sha256 %s", tc.name, tc.ref, h)
			}
		}
	})

	t.Run("layer", func(t *testing.T) {
		mtime := time.Unix(imageEpoch, 0)
		names := order
		for _, f := range files {
			if !f.hdr.ModTime.Equal(mtime) || f.hdr.Uname != "" || f.hdr.Gname != "" {
				t.Errorf("%s: mtime %v, owner names %q %q; want %v and none", f.hdr.Name, f.hdr.ModTime, f.hdr.Uname, f.hdr.Gname, mtime)
			}
		}
		if !slices.IsSorted(names) {
			t.Errorf("entries not sorted: %q", names)
		}
		for _, tc := range []struct {
			name     string
			mode     int64
			uid, gid int
		}{
			{"usr/local/bin/cbc-otel", 0o755, 0, 0},
			{"etc/ssl/certs/ca-certificates.crt", 0o644, 0, 0},
			{"etc/passwd", 0o644, 0, 0},
			{"etc/group", 0o644, 0, 0},
			{"home/nonroot/", 0o700, 65532, 65532},
			{"tmp/", 0o1777, 0, 0},
		} {
			f, ok := files[tc.name]
			if !ok {
				t.Errorf("no %s in the layer (%q)", tc.name, names)
				continue
			}
			if f.hdr.Mode != tc.mode || f.hdr.Uid != tc.uid || f.hdr.Gid != tc.gid {
				t.Errorf("%s: mode %o uid %d gid %d, want %o %d %d", tc.name, f.hdr.Mode, f.hdr.Uid, f.hdr.Gid, tc.mode, tc.uid, tc.gid)
			}
		}
		if p := string(files["etc/passwd"].body); !strings.Contains(p, "\nnonroot:x:65532:65532:") {
			t.Errorf("/etc/passwd names no nonroot 65532:\n%s", p)
		}
		n := 0
		for rest := files["etc/ssl/certs/ca-certificates.crt"].body; ; n++ {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			if _, err := x509.ParseCertificate(b.Bytes); err != nil {
				t.Fatalf("CA certificate %d: %v", n+1, err)
			}
		}
		if n < 100 {
			t.Errorf("%d CA certificates, want the Mozilla roots (over 100)", n)
		}
	})

	t.Run("binary runs", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skipf("the image's binary is linux/%s; this is %s", runtime.GOARCH, runtime.GOOS)
		}
		f, ok := files["usr/local/bin/cbc-otel"]
		if !ok {
			t.Fatal("no usr/local/bin/cbc-otel in the layer")
		}
		bin := filepath.Join(t.TempDir(), "cbc-otel")
		if err := os.WriteFile(bin, f.body, os.FileMode(f.hdr.Mode).Perm()); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("cbc-otel version: %v\n%s", err, out)
		}
		if got, want := string(out), "cbc-otel "+imageVersion+"\n"; got != want {
			t.Errorf("cbc-otel version printed %q, want %q", got, want)
		}
	})
}

// readLayer decompresses a gzipped layer and returns the tar, its entries
// by name, and their names in archive order.
func readLayer(t *testing.T, gz []byte) ([]byte, map[string]layerFile, []string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	files := map[string]layerFile{}
	tr := tar.NewReader(bytes.NewReader(raw))
	var order []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("layer: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("layer: %s: %v", h.Name, err)
		}
		if _, dup := files[h.Name]; dup {
			t.Errorf("layer: %s twice", h.Name)
		}
		files[h.Name] = layerFile{hdr: h, body: body}
		order = append(order, h.Name)
	}
	return raw, files, order
}
