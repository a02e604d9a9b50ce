// Command imagebuild builds the container images of ternd and tern-operator
// from source, with no base image, registry or container engine, and writes
// them as image archives; `make images` runs it. With -set-deploy-tag it
// instead points deploy/ at a version's images (`make deploy-version`).
//
// Every input of an image is fixed by the commit: the binaries are built
// with -trimpath and CGO_ENABLED=0, the version is stamped into
// internal/version, and every timestamp is SOURCE_DATE_EPOCH (default: the
// commit time). The same commit therefore gives the same image digests.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/tern-gw/tern/internal/ociimage"
	"github.com/tern-gw/tern/internal/version"
)

const module = "github.com/tern-gw/tern"

// programs are the images imagebuild makes, by program name and package.
var programs = []struct{ name, pkg string }{
	{"ternd", "./cmd/ternd"},
	{"tern-operator", "./cmd/tern-operator"},
}

// options are imagebuild's inputs.
type options struct {
	root     string    // module root, where go build and git run
	out      string    // directory for the archives
	registry string    // image name prefix, e.g. ghcr.io/tern-gw
	source   string    // org.opencontainers.image.source
	version  string    // version stamped into the binaries and labels
	revision string    // git commit
	created  time.Time // image and file timestamps
	arch     string    // GOARCH
	only     []string  // program names to build; all when empty
}

// built is one image written.
type built struct {
	name, ref, archive string
	digest, config     string // manifest and config (image ID) digests
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.out, "out", "bin/images", "directory for the image archives")
	fs.StringVar(&o.registry, "registry", "ghcr.io/tern-gw", "image name prefix: images are <registry>/<program>:<version>")
	fs.StringVar(&o.source, "source", "https://github.com/tern-gw/tern", "org.opencontainers.image.source label")
	fs.StringVar(&o.version, "version", "", "version to stamp and tag (default: git describe --tags --always --dirty)")
	fs.StringVar(&o.revision, "revision", "", "git revision label (default: git rev-parse HEAD)")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "image timestamps, Unix seconds (default: $SOURCE_DATE_EPOCH, else the commit time)")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "GOARCH of the binaries and images")
	only := fs.String("only", "", "comma-separated programs to build (default: ternd,tern-operator)")
	setDeploy := fs.String("set-deploy-tag", "", "instead of building, set the images' tag to the version in this kustomize directory (deploy) and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if *only != "" {
		o.only = strings.Split(*only, ",")
	}
	ctx := context.Background()
	var err error
	if o.root, err = git(ctx, ".", "rev-parse", "--show-toplevel"); err != nil {
		fmt.Fprintf(stderr, "imagebuild: %v\n", err)
		return 1
	}
	if err := o.fill(ctx, *epoch); err != nil {
		fmt.Fprintf(stderr, "imagebuild: %v\n", err)
		return 1
	}
	if *setDeploy != "" {
		if err := setDeployTag(*setDeploy, o.registry, version.Tag(o.version)); err != nil {
			fmt.Fprintf(stderr, "imagebuild: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s now installs %s/{ternd,tern-operator}:%s\n", *setDeploy, o.registry, version.Tag(o.version))
		return 0
	}
	images, err := buildAll(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "imagebuild: %v\n", err)
		return 1
	}
	overlay, err := writeOverlay(o, images)
	if err != nil {
		fmt.Fprintf(stderr, "imagebuild: %v\n", err)
		return 1
	}
	printUsage(stdout, images, overlay)
	return 0
}

// fill sets the version, revision and creation time that were not given from
// git.
func (o *options) fill(ctx context.Context, epoch string) error {
	var err error
	if o.version == "" {
		if o.version, err = git(ctx, o.root, "describe", "--tags", "--always", "--dirty"); err != nil {
			return err
		}
	}
	if o.revision == "" {
		if o.revision, err = git(ctx, o.root, "rev-parse", "HEAD"); err != nil {
			return err
		}
	}
	if epoch == "" {
		if epoch, err = git(ctx, o.root, "log", "-1", "--format=%ct"); err != nil {
			return err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("epoch %q: want Unix seconds", epoch)
	}
	o.created = time.Unix(secs, 0).UTC()
	return nil
}

// buildAll builds each program and its image, and writes the archives to
// o.out as <program>-<tag>.tar.
func buildAll(ctx context.Context, o options) ([]built, error) {
	tmp, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	tag := version.Tag(o.version)
	var out []built
	for _, p := range programs {
		if len(o.only) > 0 && !contains(o.only, p.name) {
			continue
		}
		bin := filepath.Join(tmp, p.name)
		if err := goBuild(ctx, o, p.pkg, bin); err != nil {
			return nil, err
		}
		spec := ociimage.Spec{
			Binary: bin, Name: p.name, Arch: o.arch,
			Version: o.version, Revision: o.revision, Source: o.source, Created: o.created,
		}
		if p.name == "ternd" {
			// ternd-offload: ternd with file capabilities CAP_NET_ADMIN,
			// CAP_PERFMON and CAP_BPF, for a non-root pod that runs the
			// eBPF offload (docs/offload.md, "What a pod needs").
			spec.CapCopies = map[string]uint64{"ternd-offload": 1<<12 | 1<<38 | 1<<39}
		}
		img, err := ociimage.Build(spec)
		if err != nil {
			return nil, err
		}
		b := built{
			name:    p.name,
			ref:     o.registry + "/" + p.name + ":" + tag,
			archive: filepath.Join(o.out, p.name+"-"+tag+".tar"),
		}
		if err := ociimage.WriteArchive(b.archive, b.ref, img); err != nil {
			return nil, err
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		c, err := img.ConfigName()
		if err != nil {
			return nil, err
		}
		b.digest, b.config = d.String(), c.String()
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-only %q names no program", strings.Join(o.only, ","))
	}
	return out, nil
}

// goBuild builds the static binary of pkg to bin, the version stamped in.
func goBuild(ctx context.Context, o options, pkg, bin string) error {
	ldflags := fmt.Sprintf("-s -w -X %s/internal/version.Version=%s -X %s/internal/version.Revision=%s",
		module, o.version, module, o.revision)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", bin, pkg)
	cmd.Dir = o.root
	// A static binary: the image has no libc. GOFLAGS from the caller stays
	// (e.g. -mod or -buildvcs), GOOS is always linux.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.arch)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, stderr.String())
	}
	return nil
}

// writeOverlay writes o.out/kustomization.yaml: deploy/ with the images just
// built, so `kubectl apply -k <out>` installs them without editing deploy/.
// It returns the file's directory, or "" when o.out is not inside the
// repository (a kustomization can only refer to deploy/ by a relative path).
func writeOverlay(o options, images []built) (string, error) {
	absOut, err := filepath.Abs(o.out)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(absOut, filepath.Join(o.root, "deploy"))
	if err != nil || !strings.HasPrefix(absOut, o.root+string(filepath.Separator)) {
		return "", nil
	}
	var b strings.Builder
	b.WriteString("# Written by `make images`: deploy/ with the images it built.\n")
	b.WriteString("# kubectl apply -k " + o.out + "\n")
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
	fmt.Fprintf(&b, "resources:\n  - %s\nimages:\n", filepath.ToSlash(rel))
	for _, im := range images {
		n, tag, _ := strings.Cut(im.ref[len(o.registry)+1:], ":")
		fmt.Fprintf(&b, "  - name: %s/%s\n    newTag: %s\n", o.registry, n, tag)
	}
	return o.out, os.WriteFile(filepath.Join(o.out, "kustomization.yaml"), []byte(b.String()), 0o644)
}

func printUsage(w io.Writer, images []built, overlay string) {
	for _, im := range images {
		fmt.Fprintf(w, "%s\n  archive %s\n  digest  %s\n  config  %s\n", im.ref, im.archive, im.digest, im.config)
	}
	fmt.Fprintln(w, "\nLoad into containerd (a Kubernetes node; the namespace its kubelet uses):")
	for _, im := range images {
		fmt.Fprintf(w, "  ctr -n k8s.io images import %s\n", im.archive)
	}
	fmt.Fprintln(w, "Load into a kind cluster:")
	for _, im := range images {
		fmt.Fprintf(w, "  kind load image-archive %s\n", im.archive)
	}
	if overlay != "" {
		fmt.Fprintf(w, "Install deploy/ with these images:\n  kubectl apply -k %s\n", overlay)
	}
}

// setDeployTag rewrites the image tags of the kustomize directory dir
// (deploy/): the newTag of its images block, and the tags in the operator's
// Deployment and the default Dataplane, so that `kubectl apply -f` of one
// file agrees with `kubectl apply -k`.
func setDeployTag(dir, registry, tag string) error {
	files := []string{"kustomization.yaml", "operator/deployment.yaml", "dataplane/default.yaml"}
	newTag := regexp.MustCompile(`(?m)^(\s*newTag:\s*)\S+`)
	image := regexp.MustCompile(regexp.QuoteMeta(registry) + `/(ternd|tern-operator):[\w][\w.-]*`)
	for _, f := range files {
		p := filepath.Join(dir, f)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !newTag.Match(b) && !image.Match(b) {
			return fmt.Errorf("%s: found no image tag to set", p)
		}
		nb := newTag.ReplaceAll(b, []byte("${1}"+tag))
		nb = image.ReplaceAll(nb, []byte(registry+"/${1}:"+tag))
		if err := os.WriteFile(p, nb, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// git runs git in dir and returns its trimmed output.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	s := strings.TrimSpace(string(out))
	if s == "" {
		return "", errors.New("git " + strings.Join(args, " ") + ": no output")
	}
	return s, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
