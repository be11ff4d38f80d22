package helm_test

// The multi-arch index `make image-index` writes (tools/image -arch
// amd64,arm64), built once per test run and read with the standard library
// alone, as a loader reads it; then, where podman is installed, loaded by
// the real podman. Only the host's platform runs here (amd64 on CI): the
// arm64 image is checked by its config and its binary's ELF header.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Media types of the index and its images (Docker schema 2, as `make
// image`'s single-arch tarball) and of the layout's own index.json.
const (
	mediaManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaManifest     = "application/vnd.docker.distribution.manifest.v2+json"
	mediaOCIIndex     = "application/vnd.oci.image.index.v1+json"
)

// descriptor is an OCI/Docker content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    map[string]any    `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// manifestIndex is index.json or a manifest list.
type manifestIndex struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// imageManifest is one platform's manifest.
type imageManifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
}

// ociArchive is an OCI image layout tarball, read with the standard library.
type ociArchive struct {
	files map[string][]byte
	index manifestIndex // index.json
}

// blob returns the blob digest names, checking its size when size >= 0.
func (a ociArchive) blob(t *testing.T, digest string, size int64) []byte {
	t.Helper()
	hexDigest, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q is not sha256", digest)
	}
	b, ok := a.files["blobs/sha256/"+hexDigest]
	if !ok {
		t.Fatalf("no blob %s in the archive", digest)
	}
	if size >= 0 && int64(len(b)) != size {
		t.Errorf("blob %s: %d bytes, its descriptor says %d", digest, len(b), size)
	}
	return b
}

// decode unmarshals the blob digest names into v.
func (a ociArchive) decode(t *testing.T, d descriptor, v any) {
	t.Helper()
	if err := json.Unmarshal(a.blob(t, d.Digest, d.Size), v); err != nil {
		t.Fatalf("blob %s: %v", d.Digest, err)
	}
}

// resolve does what a client pulling ref on platform os/arch does: the
// index.json entry named ref, then the list's entry for the platform.
func (a ociArchive) resolve(t *testing.T, ref, os, arch string) (descriptor, imageManifest) {
	t.Helper()
	for _, top := range a.index.Manifests {
		if top.Annotations["io.containerd.image.name"] != ref {
			continue
		}
		var list manifestIndex
		a.decode(t, top, &list)
		for _, d := range list.Manifests {
			if d.Platform["os"] == os && d.Platform["architecture"] == arch {
				var m imageManifest
				a.decode(t, d, &m)
				return d, m
			}
		}
		t.Fatalf("%s has no %s/%s image", ref, os, arch)
	}
	t.Fatalf("index.json names no %s", ref)
	return descriptor{}, imageManifest{}
}

func readOCIArchive(t *testing.T, file string) ociArchive {
	t.Helper()
	a := ociArchive{files: readTarFiles(t, file)}
	if err := json.Unmarshal(a.files["index.json"], &a.index); err != nil {
		t.Fatalf("%s: index.json: %v", file, err)
	}
	return a
}

// builtIndex is the tool's run with two architectures: the digests it
// printed (per architecture, and "index") and the archive.
type builtIndex struct {
	digests map[string]string
	file    string
}

var printedIndexLine = regexp.MustCompile(`^\S+@(sha256:[0-9a-f]{64}) (linux/(\w+)|index -> .+)$`)

// buildIndex runs tools/image for amd64 and arm64 as `make image-index`
// does, with the fixed inputs TestImage uses.
func buildIndex(t *testing.T, tool, out string) builtIndex {
	t.Helper()
	cmd := exec.Command(tool, "-src="+repoRoot(t), "-o="+out, "-arch=amd64,arm64",
		"-version="+imageVersion, "-revision="+imageRevision)
	cmd.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", imageEpoch), "TMPDIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("tools/image -arch=amd64,arm64: %v\n%s%s", err, stderr.String(), stdout.String())
	}
	t.Logf("both architectures built in %v", time.Since(start).Round(time.Millisecond))
	b := builtIndex{digests: map[string]string{}, file: out}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		m := printedIndexLine.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("tools/image printed %q", sc.Text())
		}
		key := m[3]
		if key == "" {
			key = "index"
		}
		b.digests[key] = m[1]
	}
	if len(b.digests) != 3 {
		t.Fatalf("tools/image printed %q: want amd64, arm64 and index digests", stdout.String())
	}
	return b
}

// elfMachines is the ELF machine each GOARCH's binary must say.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestImageIndex builds the index once and checks, reading the archive as
// a loader does: the layout (oci-layout, one index.json entry named with
// the chart's reference, every blob content-addressed), the index (exactly
// linux/amd64 and linux/arm64, the digests printed), per platform the tag
// resolving to that platform's image whose config says its os and
// architecture and whose binary is an ELF for its machine, the two images
// equal but for that, manifest.json for old docker loads, and podman.
func TestImageIndex(t *testing.T) {
	work := t.TempDir()
	built := buildIndex(t, buildImageTool(t, work), filepath.Join(work, "index.tar"))
	a := readOCIArchive(t, built.file)
	ref := chartImageRef(t)

	t.Run("layout", func(t *testing.T) {
		if got := string(a.files["oci-layout"]); got != `{"imageLayoutVersion":"1.0.0"}` {
			t.Errorf("oci-layout %q", got)
		}
		for name, b := range a.files {
			hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/")
			if !ok {
				if !slices.Contains([]string{"oci-layout", "index.json", "manifest.json"}, name) {
					t.Errorf("unexpected file %s", name)
				}
				continue
			}
			if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexDigest {
				t.Errorf("%s holds sha256 %x", name, sum)
			}
		}
		// podman load of an oci-archive wants one entry; it and docker
		// (containerd) name the image from its annotations.
		ix := a.index
		if ix.SchemaVersion != 2 || ix.MediaType != mediaOCIIndex || len(ix.Manifests) != 1 {
			t.Fatalf("index.json %s: want one entry", a.files["index.json"])
		}
		d := ix.Manifests[0]
		tag := ref[strings.LastIndex(ref, ":")+1:]
		if d.MediaType != mediaManifestList || d.Digest != built.digests["index"] ||
			!maps.Equal(d.Annotations, map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag}) {
			t.Errorf("index.json entry %+v: want the %s %s printed, named %s and %s", d, mediaManifestList, built.digests["index"], ref, tag)
		}
	})

	var list manifestIndex
	a.decode(t, a.index.Manifests[0], &list)
	t.Run("index lists linux/amd64 and linux/arm64", func(t *testing.T) {
		if list.SchemaVersion != 2 || list.MediaType != mediaManifestList {
			t.Errorf("schema %d, media type %q; want 2, %s", list.SchemaVersion, list.MediaType, mediaManifestList)
		}
		var got []string
		for _, d := range list.Manifests {
			// os and architecture, nothing else (no variant: GOARCH arm64
			// is plain ARMv8, and the config says none either).
			if len(d.Platform) != 2 {
				t.Errorf("%s: platform %v, want os and architecture only", d.Digest, d.Platform)
			}
			if d.MediaType != mediaManifest {
				t.Errorf("%s: media type %s, want %s", d.Digest, d.MediaType, mediaManifest)
			}
			got = append(got, fmt.Sprintf("%v/%v %s", d.Platform["os"], d.Platform["architecture"], d.Digest))
		}
		want := []string{"linux/amd64 " + built.digests["amd64"], "linux/arm64 " + built.digests["arm64"]}
		if !slices.Equal(got, want) {
			t.Errorf("index entries %q, want %q (the digests printed)", got, want)
		}
	})

	configs := map[string]map[string]any{}
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run("tag resolves on linux/"+arch, func(t *testing.T) {
			d, m := a.resolve(t, ref, "linux", arch)
			if d.Digest != built.digests[arch] {
				t.Errorf("%s on linux/%s: %s, want %s", ref, arch, d.Digest, built.digests[arch])
			}
			var cfg map[string]any
			a.decode(t, m.Config, &cfg)
			configs[arch] = cfg
			if cfg["os"] != "linux" || cfg["architecture"] != arch || cfg["variant"] != nil {
				t.Errorf("config: os %v architecture %v variant %v, want linux %s none", cfg["os"], cfg["architecture"], cfg["variant"], arch)
			}
			if len(m.Layers) != 1 {
				t.Fatalf("%d layers, want 1", len(m.Layers))
			}
			_, files, _ := readLayer(t, a.blob(t, m.Layers[0].Digest, m.Layers[0].Size))
			bin, ok := files["usr/local/bin/cbc-otel"]
			if !ok {
				t.Fatal("no usr/local/bin/cbc-otel in the layer")
			}
			f, err := elf.NewFile(bytes.NewReader(bin.body))
			if err != nil {
				t.Fatalf("usr/local/bin/cbc-otel: %v", err)
			}
			if f.Machine != elfMachines[arch] || f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB || f.Type != elf.ET_EXEC {
				t.Errorf("usr/local/bin/cbc-otel: %v %v %v %v, want %v ELFCLASS64 ELFDATA2LSB ET_EXEC", f.Machine, f.Class, f.Data, f.Type, elfMachines[arch])
			}
			// Static: no interpreter, no shared libraries (CGO_ENABLED=0).
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Error("usr/local/bin/cbc-otel has a PT_INTERP: not static")
				}
			}
			if arch != runtime.GOARCH || runtime.GOOS != "linux" {
				return
			}
			path := filepath.Join(t.TempDir(), "cbc-otel")
			if err := os.WriteFile(path, bin.body, 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(path, "version").CombinedOutput()
			if got, want := string(out), "cbc-otel "+imageVersion+"\n"; err != nil || got != want {
				t.Errorf("cbc-otel version from the linux/%s layer: %q (%v), want %q", arch, got, err, want)
			}
		})
	}

	t.Run("same image on both but for the architecture", func(t *testing.T) {
		if len(configs) != 2 {
			t.Fatal("a platform's config was not read (see above)")
		}
		for _, c := range configs {
			delete(c, "architecture")
			delete(c, "rootfs") // the layer's diff_id: another binary
		}
		if fmt.Sprint(configs["amd64"]) != fmt.Sprint(configs["arm64"]) {
			t.Errorf("configs differ beyond architecture and layer:\n%v\n%v", configs["amd64"], configs["arm64"])
		}
	})

	t.Run("manifest.json for docker without the containerd store", func(t *testing.T) {
		var dm []struct {
			Config   string
			RepoTags []string
			Layers   []string
		}
		if err := json.Unmarshal(a.files["manifest.json"], &dm); err != nil {
			t.Fatal(err)
		}
		_, m := a.resolve(t, ref, "linux", "amd64")
		if len(dm) != 1 || !slices.Equal(dm[0].RepoTags, []string{ref}) ||
			dm[0].Config != "blobs/sha256/"+strings.TrimPrefix(m.Config.Digest, "sha256:") ||
			!slices.Equal(dm[0].Layers, []string{"blobs/sha256/" + strings.TrimPrefix(m.Layers[0].Digest, "sha256:")}) {
			t.Errorf("manifest.json %s: want the linux/amd64 image alone, tagged %s", a.files["manifest.json"], ref)
		}
	})

	// What was checked above is what `make image-index` builds: the same
	// tool, both architectures, the chart's tag (no -tag of its own).
	t.Run("make image-index", func(t *testing.T) {
		if _, err := exec.LookPath("make"); err != nil {
			t.Skip("no make: the Makefile's image-index recipe is not checked")
		}
		dry := exec.Command("make", "-n", "image-index")
		dry.Dir = repoRoot(t)
		recipe, err := dry.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n image-index: %v\n%s", err, recipe)
		}
		r := string(recipe)
		if !strings.Contains(r, "cd tools/image") || !strings.Contains(r, " -arch=amd64,arm64 ") ||
			!strings.Contains(r, "/bin/cbc-otel-image-index.tar ") || strings.Contains(r, "-tag") {
			t.Errorf("make image-index does not run tools/image -arch=amd64,arm64 into bin/cbc-otel-image-index.tar with the chart's tag:\n%s", r)
		}
	})

	t.Run("podman load", func(t *testing.T) { podmanLoadIndex(t, built, ref) })
}

// podmanLoadIndex: `podman load` takes the archive as an oci-archive (the
// image's digest is the index's: it went through the index, not
// manifest.json), picks the host's platform, and that image runs;
// `podman manifest add --all` reads both platforms from the same archive.
func podmanLoadIndex(t *testing.T, built builtIndex, ref string) {
	// podman_test.go's runtime: the test's own configuration and storage,
	// under a short path (podman refuses a run root of over 50 characters,
	// and a subtest's TempDir carries the test's whole name).
	dir, err := os.MkdirTemp("", "pmidx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := newPodman(t, dir)
	p.runCopying(t, "load", "-i", built.file)
	var inspect []struct {
		Architecture, Os, Digest string
		RepoTags, RepoDigests    []string
	}
	if err := json.Unmarshal([]byte(p.run(t, "image", "inspect", ref)), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect %s: %v %+v", ref, err, inspect)
	}
	img := inspect[0]
	repo := ref[:strings.LastIndex(ref, ":")]
	if img.Architecture != runtime.GOARCH || img.Os != "linux" || img.Digest != built.digests["index"] ||
		!slices.Contains(img.RepoTags, ref) || !slices.Contains(img.RepoDigests, repo+"@"+built.digests[runtime.GOARCH]) {
		t.Errorf("podman image inspect: %+v; want linux/%s, digest the index's %s, tagged %s, repo digest %s", img, runtime.GOARCH, built.digests["index"], ref, built.digests[runtime.GOARCH])
	}
	out := p.run(t, "run", "--rm", "--network", "none", ref, "version")
	if want := "cbc-otel " + imageVersion + "\n"; out != want {
		t.Errorf("podman run %s version: %q, want %q", ref, out, want)
	}

	list := "localhost/cbc-otel-index-test:latest"
	p.run(t, "manifest", "create", list)
	p.runCopying(t, "manifest", "add", "--all", list, "oci-archive:"+built.file)
	var m manifestIndex
	if err := json.Unmarshal([]byte(p.run(t, "manifest", "inspect", list)), &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range m.Manifests {
		got = append(got, fmt.Sprintf("%v/%v %s", d.Platform["os"], d.Platform["architecture"], d.Digest))
	}
	slices.Sort(got)
	if want := []string{"linux/amd64 " + built.digests["amd64"], "linux/arm64 " + built.digests["arm64"]}; !slices.Equal(got, want) {
		t.Errorf("podman manifest add --all: %q, want %q", got, want)
	}
}
