package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The whole `make image-index` path (both binaries built, the archive read
// with the standard library, the ELF headers, podman load) is
// deploy/helm/imageindex_test.go in the main module.

// archImages builds one test image per architecture and returns them with
// their digests by architecture.
func archImages(t *testing.T, arches ...string) ([]v1.Image, map[string]v1.Hash) {
	t.Helper()
	var imgs []v1.Image
	digests := map[string]v1.Hash{}
	for _, a := range arches {
		s := testSpec(t)
		s.Arch = a
		s.Binary = append(s.Binary, a...) // a different binary per architecture, as for real
		img, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		if digests[a], err = img.Digest(); err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	return imgs, digests
}

// TestIndex: a Docker manifest list of the images as they are, each entry's
// platform its config's.
func TestIndex(t *testing.T) {
	imgs, digests := archImages(t, "amd64", "arm64")
	idx, err := Index(imgs)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.DockerManifestList || im.SchemaVersion != 2 {
		t.Errorf("media type %q schema %d, want %q 2", im.MediaType, im.SchemaVersion, types.DockerManifestList)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("%d entries, want 2", len(im.Manifests))
	}
	for i, arch := range []string{"amd64", "arm64"} {
		d := im.Manifests[i]
		want := v1.Platform{OS: "linux", Architecture: arch}
		if d.Platform == nil || !d.Platform.Equals(want) {
			t.Errorf("entry %d: platform %v, want %v", i, d.Platform, want)
		}
		if d.Digest != digests[arch] || d.MediaType != types.DockerManifestSchema2 {
			t.Errorf("entry %d: %s %s, want the %s image as built alone: %s %s", i, d.MediaType, d.Digest, arch, types.DockerManifestSchema2, digests[arch])
		}
	}
}

// TestIndexRejects: nothing to index, or one platform twice.
func TestIndexRejects(t *testing.T) {
	if _, err := Index(nil); err == nil {
		t.Error("an index of no image")
	}
	imgs, _ := archImages(t, "amd64", "amd64")
	if _, err := Index(imgs); err == nil {
		t.Error("an index with linux/amd64 twice")
	}
}

// indexArchive builds the test index and writes its archive, returning the
// index and the archive's path.
func indexArchive(t *testing.T, created time.Time) (v1.ImageIndex, string) {
	t.Helper()
	imgs, _ := archImages(t, "amd64", "arm64")
	idx, err := Index(imgs)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("example.com/cbc-otel:v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "index.tar")
	if err := writeIndexArchive(file, tag, idx, created); err != nil {
		t.Fatal(err)
	}
	return idx, file
}

// TestIndexArchiveReproducible: the same images give the same archive
// bytes; another SOURCE_DATE_EPOCH other bytes (the mtimes) but the same
// index digest.
func TestIndexArchiveReproducible(t *testing.T) {
	created := time.Unix(1700000000, 0).UTC()
	read := func(created time.Time) (v1.Hash, []byte) {
		idx, file := indexArchive(t, created)
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d, b
	}
	d1, b1 := read(created)
	d2, b2 := read(created)
	if d1 != d2 || !bytes.Equal(b1, b2) {
		t.Errorf("same images, two archives: index %s %s, %d and %d bytes", d1, d2, len(b1), len(b2))
	}
	d3, b3 := read(created.Add(time.Second))
	if d3 != d1 || bytes.Equal(b3, b1) {
		t.Errorf("another epoch: index %s (want %s), archive equal: %v", d3, d1, bytes.Equal(b3, b1))
	}
	tr := tar.NewReader(bytes.NewReader(b1))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(created) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s: mtime %v owner %d:%d %q, want %v, root, no names", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, created)
		}
	}
}

// untar unpacks an archive of regular files and directories into dir.
func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIndexArchivePush: the archive, unpacked, is an OCI layout whose one
// entry is the index, as `crane push DIR REF` reads it (one entry that is
// an index: pushed as such); pushed to a registry, the tag resolves to the
// index, and for each platform to that platform's image.
func TestIndexArchivePush(t *testing.T) {
	idx, file := indexArchive(t, time.Unix(1700000000, 0))
	want, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	untar(t, file, dir)
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := l.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Manifests) != 1 || !top.Manifests[0].MediaType.IsIndex() || top.Manifests[0].Digest != want {
		t.Fatalf("index.json %+v: want one entry, the index %s", top.Manifests, want)
	}
	if a := top.Manifests[0].Annotations; a[AnnotationImageName] != "example.com/cbc-otel:v1.2.3" || a[AnnotationRefName] != "v1.2.3" {
		t.Errorf("index.json annotations %v", a)
	}
	loaded, err := l.ImageIndex(want)
	if err != nil {
		t.Fatal(err)
	}

	ref := testRegistryTag(t)
	if err := remote.WriteIndex(ref, loaded); err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(ref)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want || desc.MediaType != types.DockerManifestList {
		t.Errorf("registry: %s %s, want the index %s", desc.MediaType, desc.Digest, want)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		img, err := remote.Image(ref, remote.WithPlatform(*d.Platform))
		if err != nil {
			t.Fatalf("%s: %v", d.Platform, err)
		}
		got, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got != d.Digest || cf.Architecture != d.Platform.Architecture || cf.OS != d.Platform.OS {
			t.Errorf("%s resolves to %s (%s/%s), want %s", d.Platform, got, cf.OS, cf.Architecture, d.Digest)
		}
	}

	// manifest.json: the first image (amd64) alone, for a docker load that
	// reads only it, its paths naming files of the archive.
	var m []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != "example.com/cbc-otel:v1.2.3" || len(m[0].Layers) != 1 {
		t.Fatalf("manifest.json %s", b)
	}
	amd64, err := loaded.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfgName, err := amd64.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if m[0].Config != "blobs/sha256/"+cfgName.Hex {
		t.Errorf("manifest.json config %s, want the amd64 image's %s", m[0].Config, cfgName)
	}
	for _, p := range append([]string{m[0].Config}, m[0].Layers...) {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("manifest.json names %s: %v", p, err)
		}
	}
}
