// Command pauseimage writes the pod-sandbox ("pause") image of the test cluster of
// hack/cluster.sh as a docker archive, from a static binary built from ./pause: one layer
// holding /pause, no base image, nothing pulled. Timestamps are fixed, so the same binary gives
// the same image digest.
//
//	CGO_ENABLED=0 go build -o /tmp/pause ./hack/pauseimage/pause
//	go run ./hack/pauseimage -binary /tmp/pause -o pause.tar
//
// The archive loads with `ctr -n k8s.io images import pause.tar`.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Ref is the name the cluster's containerd is told to use as its sandbox image.
const Ref = "tern.local/pause:3.10"

func main() {
	binary := flag.String("binary", "", "the static pause binary")
	out := flag.String("o", "pause.tar", "the docker archive to write")
	ref := flag.String("tag", Ref, "the image's name")
	flag.Parse()
	if err := run(*binary, *out, *ref); err != nil {
		fmt.Fprintln(os.Stderr, "pauseimage:", err)
		os.Exit(1)
	}
}

func run(binary, out, ref string) error {
	if binary == "" {
		return fmt.Errorf("-binary is required")
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(bin)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return err
	}
	img := mutate.MediaType(empty.Image, types.DockerManifestSchema2)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = []string{"/pause"}
	cf.Config.User = "65535:65535"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(out, tag, img)
}
