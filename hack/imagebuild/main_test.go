package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func testOptions(t *testing.T) options {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return options{
		root: root, out: t.TempDir(), registry: "ghcr.io/tern-gw", source: "https://github.com/tern-gw/tern",
		version: "v0.1.0-test", revision: "0123456789abcdef0123456789abcdef01234567",
		created: time.Unix(1767225600, 0).UTC(), arch: "amd64", only: []string{"ternd"},
	}
}

// The same source and inputs give the same digest: ternd is built from
// source twice, into different directories, exactly as `make images` does.
// A different version stamped into the binary gives a different digest.
func TestSameCommitSameDigest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ternd (a minute with a cold build cache)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	ctx := context.Background()
	o := testOptions(t)
	first, err := buildAll(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	o.out = t.TempDir()
	second, err := buildAll(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if first[0].digest != second[0].digest || first[0].config != second[0].config {
		t.Fatalf("two builds of one commit differ: %+v and %+v", first[0], second[0])
	}
	t.Logf("%s: %s", first[0].ref, first[0].digest)
	if want := filepath.Join(o.out, "ternd-v0.1.0-test.tar"); second[0].archive != want || second[0].ref != "ghcr.io/tern-gw/ternd:v0.1.0-test" {
		t.Errorf("archive %s ref %s", second[0].archive, second[0].ref)
	}

	// The archive holds the built ternd, which reports the stamped version.
	img, err := tarball.ImageFromPath(second[0].archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Labels["org.opencontainers.image.version"] != "v0.1.0-test" ||
		cf.Config.Labels["org.opencontainers.image.revision"] != o.revision {
		t.Errorf("labels %v", cf.Config.Labels)
	}

	o.out, o.version = t.TempDir(), "v0.1.1-test"
	third, err := buildAll(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if third[0].digest == first[0].digest {
		t.Error("another version stamped, same digest")
	}
}

func TestSetDeployTag(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"kustomization.yaml", "operator/deployment.yaml", "dataplane/default.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Twice: setting the tag it already has is no error.
	for range 2 {
		if err := setDeployTag(dir, "ghcr.io/tern-gw", "v9.8.7"); err != nil {
			t.Fatal(err)
		}
	}
	for f, want := range map[string][]string{
		"kustomization.yaml":       {"newTag: v9.8.7"},
		"operator/deployment.yaml": {"image: ghcr.io/tern-gw/tern-operator:v9.8.7"},
		"dataplane/default.yaml":   {"image: ghcr.io/tern-gw/ternd:v9.8.7"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %q:\n%s", f, w, b)
			}
		}
		if n := strings.Count(string(b), "newTag:"); f == "kustomization.yaml" && n != strings.Count(string(b), "newTag: v9.8.7") {
			t.Errorf("%s: a newTag was left:\n%s", f, b)
		}
	}
}

func TestWriteOverlay(t *testing.T) {
	o := testOptions(t)
	o.out = filepath.Join(o.root, "bin", "images-test-"+strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(o.out) })
	dir, err := writeOverlay(o, []built{
		{name: "ternd", ref: "ghcr.io/tern-gw/ternd:v1"},
		{name: "tern-operator", ref: "ghcr.io/tern-gw/tern-operator:v1"},
	})
	if err != nil || dir != o.out {
		t.Fatalf("writeOverlay = %q, %v", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(o.out, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"resources:\n  - ../../deploy\n", "  - name: ghcr.io/tern-gw/ternd\n    newTag: v1\n", "  - name: ghcr.io/tern-gw/tern-operator\n    newTag: v1\n"} {
		if !strings.Contains(string(b), w) {
			t.Errorf("overlay lacks %q:\n%s", w, b)
		}
	}
	// Outside the repository there is no relative way to deploy/.
	o.out = t.TempDir()
	if dir, err := writeOverlay(o, nil); err != nil || dir != "" {
		t.Errorf("outside the repository: %q, %v", dir, err)
	}
}
