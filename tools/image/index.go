package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The annotations naming an image in an OCI layout's index.json: containerd
// and `docker load` read io.containerd.image.name (the full reference), and
// podman reads it before the OCI ref.name (which holds the tag alone, as
// containerd's export writes it).
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// Index ties images, one per platform, into one multi-arch reference: a
// Docker manifest list (the media type that goes with the images' Docker
// schema 2 manifests, which registries, podman and containerd all take),
// each entry's platform read from its image's config. The images are kept
// as they are: each entry has the digest the same image has alone.
func Index(imgs []v1.Image) (v1.ImageIndex, error) {
	if len(imgs) == 0 {
		return nil, errors.New("index: no image")
	}
	var adds []mutate.IndexAddendum
	seen := map[string]bool{}
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("index: config: %w", err)
		}
		p := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant, OSVersion: cf.OSVersion}
		if p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("index: an image without os or architecture (%q/%q)", p.OS, p.Architecture)
		}
		// Two entries for one platform would make the reference resolve to
		// whichever a client happens to pick.
		if seen[p.String()] {
			return nil, fmt.Errorf("index: two images for %s", p.String())
		}
		seen[p.String()] = true
		mt, err := img.MediaType()
		if err != nil {
			return nil, fmt.Errorf("index: %w", err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{MediaType: mt, Platform: &p}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.DockerManifestList)
	if _, err := idx.Digest(); err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	return idx, nil
}

// archiveFile is one regular file of an index archive.
type archiveFile struct {
	name string
	body []byte
}

// indexArchiveFiles lays idx out as an OCI image layout: oci-layout,
// index.json naming idx (one entry, tagged tag: `podman load` of an
// oci-archive wants exactly one), every blob under blobs/sha256/ once, and
// a manifest.json naming the first image only, for a `docker load` without
// the containerd image store, which reads nothing else (an index cannot be
// said in manifest.json). Files are in a fixed order: blobs by digest, then
// the three named files.
func indexArchiveFiles(tag name.Tag, idx v1.ImageIndex) ([]archiveFile, error) {
	blobs := map[v1.Hash][]byte{}
	add := func(raw []byte) v1.Hash {
		h, _, _ := v1.SHA256(bytes.NewReader(raw)) // reading memory cannot fail
		blobs[h] = raw
		return h
	}
	rawIndex, err := idx.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("index archive: %w", err)
	}
	indexDigest := add(rawIndex)
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("index archive: %w", err)
	}
	type dockerManifest struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	var docker []dockerManifest
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("index archive: %s: %w", d.Digest, err)
		}
		raw, err := img.RawManifest()
		if err != nil {
			return nil, fmt.Errorf("index archive: %s: %w", d.Digest, err)
		}
		add(raw)
		cfg, err := img.RawConfigFile()
		if err != nil {
			return nil, fmt.Errorf("index archive: %s config: %w", d.Digest, err)
		}
		dm := dockerManifest{Config: blobPath(add(cfg))}
		layers, err := img.Layers()
		if err != nil {
			return nil, fmt.Errorf("index archive: %s layers: %w", d.Digest, err)
		}
		for _, l := range layers {
			rc, err := l.Compressed()
			if err != nil {
				return nil, fmt.Errorf("index archive: %s layer: %w", d.Digest, err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return nil, fmt.Errorf("index archive: %s layer: %w", d.Digest, err)
			}
			dm.Layers = append(dm.Layers, blobPath(add(b)))
		}
		if len(docker) == 0 {
			dm.RepoTags = []string{tag.String()}
			docker = append(docker, dm)
		}
	}
	top := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: im.MediaType,
			Size:      int64(len(rawIndex)),
			Digest:    indexDigest,
			Annotations: map[string]string{
				AnnotationImageName: tag.String(),
				AnnotationRefName:   tag.TagStr(),
			},
		}},
	}
	indexJSON, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("index archive: index.json: %w", err)
	}
	manifestJSON, err := json.Marshal(docker)
	if err != nil {
		return nil, fmt.Errorf("index archive: manifest.json: %w", err)
	}
	var files []archiveFile
	for h, b := range blobs {
		files = append(files, archiveFile{blobPath(h), b})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	return append(files,
		archiveFile{"index.json", indexJSON},
		archiveFile{"manifest.json", manifestJSON},
		archiveFile{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	), nil
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// writeIndexArchive writes idx, tagged tag, as an OCI image layout tarball
// (an oci-archive): `podman load` and `docker load` read it, and `crane
// push` reads it unpacked. Reproducible: fixed order, every mtime created,
// root-owned, fixed modes. Through a temporary file renamed into place, as
// writeTarball.
func writeIndexArchive(out string, tag name.Tag, idx v1.ImageIndex, created time.Time) error {
	files, err := indexArchiveFiles(tag, idx)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(name string, typ byte, mode, size int64) *tar.Header {
		return &tar.Header{Name: name, Typeflag: typ, Mode: mode, Size: size, ModTime: created, Format: tar.FormatUSTAR}
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(hdr(d, tar.TypeDir, 0o755, 0)); err != nil {
			return fmt.Errorf("index archive: %w", err)
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(hdr(f.name, tar.TypeReg, 0o644, int64(len(f.body)))); err != nil {
			return fmt.Errorf("index archive: %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return fmt.Errorf("index archive: %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("index archive: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("writing the index: %w", err)
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing the index: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing the index: %w", err)
	}
	return nil
}
