package ociimage

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

var created = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// writeBinary writes a stand-in executable: Build never looks inside it.
func writeBinary(t *testing.T, dir, content string) string {
	t.Helper()
	p := filepath.Join(dir, "ternd")
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func spec(bin string) Spec {
	return Spec{Binary: bin, Name: "ternd", Arch: "amd64", Version: "v0.1.0", Revision: "0123456789abcdef",
		Source: "https://github.com/tern-gw/tern", Created: created}
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The same inputs give the same digest, built from copies in different
// directories at different times, and any input change gives another.
func TestBuildReproducible(t *testing.T) {
	a, err := Build(spec(writeBinary(t, t.TempDir(), "binary one")))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a leaked wall-clock time would now differ
	b, err := Build(spec(writeBinary(t, t.TempDir(), "binary one")))
	if err != nil {
		t.Fatal(err)
	}
	if da, db := digest(t, a), digest(t, b); da != db {
		t.Fatalf("same inputs, different digests: %s and %s", da, db)
	}

	base := digest(t, a)
	changes := map[string]func(*Spec){
		"binary":   func(s *Spec) { s.Binary = writeBinary(t, t.TempDir(), "binary two") },
		"version":  func(s *Spec) { s.Version = "v0.1.1" },
		"revision": func(s *Spec) { s.Revision = "fedcba9876543210" },
		"created":  func(s *Spec) { s.Created = created.Add(time.Second) },
	}
	for what, change := range changes {
		s := spec(writeBinary(t, t.TempDir(), "binary one"))
		change(&s)
		img, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		if digest(t, img) == base {
			t.Errorf("a changed %s left the digest at %s", what, base)
		}
	}
}

func TestBuildConfig(t *testing.T) {
	img, err := Build(spec(writeBinary(t, t.TempDir(), "x")))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Time.Equal(created) {
		t.Errorf("platform %s/%s created %v", cf.OS, cf.Architecture, cf.Created)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("User = %q", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/ternd"}) || len(c.Cmd) != 0 {
		t.Errorf("Entrypoint = %q, Cmd = %q", c.Entrypoint, c.Cmd)
	}
	if !slices.Contains(c.Env, "PATH=/usr/local/bin:/usr/bin:/bin") {
		t.Errorf("Env = %q", c.Env)
	}
	want := map[string]string{
		LabelSource:   "https://github.com/tern-gw/tern",
		LabelRevision: "0123456789abcdef",
		LabelVersion:  "v0.1.0",
		LabelTitle:    "ternd",
		LabelCreated:  "2026-01-02T03:04:05Z",
	}
	for k, v := range want {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	mt, err := img.MediaType()
	if err != nil || mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("media type %s, %v", mt, err)
	}
}

func TestBuildLayer(t *testing.T) {
	img, err := Build(spec(writeBinary(t, t.TempDir(), "the executable")))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	data := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], data[h.Name] = h, string(b)
		if !h.ModTime.Equal(created) {
			t.Errorf("%s: mtime %v, want %v", h.Name, h.ModTime, created)
		}
	}
	exe := files["usr/local/bin/ternd"]
	if exe == nil {
		t.Fatalf("no usr/local/bin/ternd in %v", files)
	}
	if exe.Mode != 0o755 || exe.Uid != 0 || exe.Gid != 0 || data[exe.Name] != "the executable" {
		t.Errorf("usr/local/bin/ternd: mode %o owner %d:%d content %q", exe.Mode, exe.Uid, exe.Gid, data[exe.Name])
	}
	if got, want := data["etc/passwd"], "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"; got != want {
		t.Errorf("etc/passwd = %q, want %q", got, want)
	}
	if got, want := data["etc/group"], "root:x:0:\nnonroot:x:65532:\n"; got != want {
		t.Errorf("etc/group = %q, want %q", got, want)
	}
	if h := files["home/nonroot/"]; h == nil || h.Uid != UID || h.Typeflag != tar.TypeDir {
		t.Errorf("home/nonroot/: %+v", h)
	}
	if h := files["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp/: %+v", h)
	}
}

// The archive holds the image under its tag, and reading it back gives the
// same config (the image ID a runtime shows) and layers.
func TestWriteArchive(t *testing.T) {
	img, err := Build(spec(writeBinary(t, t.TempDir(), "x")))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ternd.tar")
	if err := WriteArchive(p, "ghcr.io/tern-gw/ternd:v0.1.0", img); err != nil {
		t.Fatal(err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{"ghcr.io/tern-gw/ternd:v0.1.0"}) {
		t.Fatalf("manifest.json: %+v", m)
	}
	back, err := tarball.ImageFromPath(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.ConfigName()
	if got, err := back.ConfigName(); err != nil || got != want {
		t.Errorf("config digest %s (%v), want %s", got, err, want)
	}
	if err := WriteArchive(p, "not a reference", img); err == nil {
		t.Error("WriteArchive took an invalid reference")
	}
}

func TestBuildErrors(t *testing.T) {
	if _, err := Build(Spec{Name: "ternd", Arch: "amd64"}); err == nil {
		t.Error("no Binary: no error")
	}
	if _, err := Build(spec(filepath.Join(t.TempDir(), "missing"))); err == nil {
		t.Error("missing binary: no error")
	}
}

// TestBuildCapCopies: a CapCopies entry is a copy of the binary beside it
// whose PAX record carries the security.capability xattr `setcap
// cap_net_admin,cap_perfmon,cap_bpf+ep` writes (the bytes getfattr shows
// for it, docs/offload.md); the binary itself has none.
func TestBuildCapCopies(t *testing.T) {
	s := spec(writeBinary(t, t.TempDir(), "the executable"))
	s.CapCopies = map[string]uint64{"ternd-offload": 1<<12 | 1<<38 | 1<<39}
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	const key = "SCHILY.xattr.security.capability"
	want := "\x01\x00\x00\x02\x00\x10\x00\x00\x00\x00\x00\x00\xc0\x00\x00\x00\x00\x00\x00\x00"
	seen := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		switch h.Name {
		case "usr/local/bin/ternd":
			if _, ok := h.PAXRecords[key]; ok {
				t.Errorf("%s has file capabilities", h.Name)
			}
		case "usr/local/bin/ternd-offload":
			if got := h.PAXRecords[key]; got != want || h.Mode != 0o755 || h.Uid != 0 || string(b) != "the executable" {
				t.Errorf("%s: xattr %x (want %x), mode %o, owner %d, content %q", h.Name, got, want, h.Mode, h.Uid, b)
			}
		}
		seen[h.Name] = true
	}
	if !seen["usr/local/bin/ternd-offload"] {
		t.Error("no usr/local/bin/ternd-offload")
	}
}
