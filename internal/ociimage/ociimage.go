// Package ociimage builds the container images of Tern's binaries from
// nothing but a static executable: no base image, no registry, no container
// engine. An image is one layer holding the executable, a /etc/passwd and
// /etc/group that name the non-root user it runs as, and the few
// directories programs expect; every timestamp in it is a given one, so the
// same executable and inputs give the same digest on any machine.
package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user and group the images run as: 65532, "nonroot", the ID distroless
// images use, so volume ownership and PodSecurity settings written for those
// work unchanged. The rendered pods and deploy/ set the same numbers.
const (
	UID      = 65532
	GID      = 65532
	UserName = "nonroot"
)

// BinDir is where an image holds its executable, on the image's PATH, so a
// Kubernetes `command: [ternd]` finds it as well as the entrypoint does.
const BinDir = "/usr/local/bin"

// Labels of the OpenContainers image spec that Build sets.
const (
	LabelSource   = "org.opencontainers.image.source"
	LabelRevision = "org.opencontainers.image.revision"
	LabelVersion  = "org.opencontainers.image.version"
	LabelTitle    = "org.opencontainers.image.title"
	LabelCreated  = "org.opencontainers.image.created"
)

// Spec describes one image.
type Spec struct {
	// Binary is the path of a static Linux executable. The image holds it as
	// BinDir/Name, mode 0755, owned by root so the user it runs as cannot
	// replace it.
	Binary string
	// Name is the program's name: the executable's name in the image and
	// the title label.
	Name string
	// Arch is the GOARCH the executable was built for, e.g. "amd64".
	Arch string
	// Version, Revision and Source fill the version, revision and source
	// labels; empty ones are left out.
	Version, Revision, Source string
	// Created is the image's creation time and the modification time of
	// every file in its layer. Use the commit time (SOURCE_DATE_EPOCH) for
	// a reproducible image; it is truncated to whole seconds.
	Created time.Time
	// CapCopies are copies of the binary to add beside it, each under its
	// own name in BinDir with file capabilities: the bitmask of
	// capabilities (bit n is capability n, e.g. 1<<39 CAP_BPF) it gets
	// permitted and effective when executed, as `setcap caps+ep` would set
	// them (the security.capability xattr, a version 2 vfs_cap_data,
	// carried in the layer's PAX record SCHILY.xattr.security.capability).
	// A copy, not a link: the xattr belongs to the file, and the binary
	// itself must stay without it, since a process whose bounding set
	// lacks a file capability cannot execute that file.
	CapCopies map[string]uint64
}

// vfsCapData returns the security.capability xattr granting caps permitted
// and effective (include/uapi/linux/capability.h: magic_etc
// VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE, then the permitted and
// inheritable words of the low and high halves, little-endian).
func vfsCapData(caps uint64) []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000000|0x000001)
	binary.LittleEndian.PutUint32(b[4:], uint32(caps))
	binary.LittleEndian.PutUint32(b[12:], uint32(caps>>32))
	return b
}

// Build returns the image of s: OCI media types, one gzip-compressed layer,
// the entrypoint BinDir/Name, user UID:GID, PATH=BinDir:/usr/bin:/bin and the
// labels. It reads s.Binary once. It returns an error if the binary cannot be
// read or s lacks a Name, Arch or Binary.
func Build(s Spec) (v1.Image, error) {
	if s.Name == "" || s.Arch == "" || s.Binary == "" {
		return nil, errors.New("ociimage: Spec needs Binary, Name and Arch")
	}
	exe, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	created := s.Created.UTC().Truncate(time.Second)
	layerTar, err := rootfs(s.Name, exe, created, s.CapCopies)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "ociimage.Build: " + path.Join(BinDir, s.Name) + ", /etc/passwd, /etc/group",
			Comment:   "built from source by tern's hack/imagebuild",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = s.Arch
	cf.OS = "linux"
	cf.Created = v1.Time{Time: created}
	labels := map[string]string{
		LabelTitle:   s.Name,
		LabelCreated: created.Format(time.RFC3339),
	}
	for k, v := range map[string]string{LabelSource: s.Source, LabelRevision: s.Revision, LabelVersion: s.Version} {
		if v != "" {
			labels[k] = v
		}
	}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, GID),
		Entrypoint: []string{path.Join(BinDir, s.Name)},
		Env:        []string{"PATH=" + BinDir + ":/usr/bin:/bin"},
		WorkingDir: "/",
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("ociimage: %w", err)
	}
	return img, nil
}

// rootfs returns the uncompressed tar of the image's only layer. Entries are
// in a fixed order with fixed owners, modes and times, so the bytes depend
// only on the arguments.
func rootfs(name string, exe []byte, mtime time.Time, capCopies map[string]uint64) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n",
		UserName, UID, GID, UserName, UserName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, GID)
	type entry struct {
		name     string
		mode     int64
		uid, gid int
		data     []byte // nil for a directory
		xattrs   map[string]string
	}
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/", mode: 0o755},
		{name: "home/" + UserName + "/", mode: 0o700, uid: UID, gid: GID},
		{name: "root/", mode: 0o700},
		// Programs expect a /tmp; with readOnlyRootFilesystem it stays
		// read-only unless the pod mounts an emptyDir there.
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: "usr/local/bin/" + name, mode: 0o755, data: exe},
	}
	for _, c := range slices.Sorted(maps.Keys(capCopies)) {
		entries = append(entries, entry{name: "usr/local/bin/" + c, mode: 0o755, data: exe,
			xattrs: map[string]string{"SCHILY.xattr.security.capability": string(vfsCapData(capCopies[c]))}})
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.xattrs != nil {
			h.PAXRecords = e.xattrs
		}
		if e.data == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("ociimage: tar %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("ociimage: tar %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("ociimage: tar: %w", err)
	}
	return buf.Bytes(), nil
}

// WriteArchive writes img to the file path as a docker-style image archive
// (`docker save` layout: manifest.json, the config and the compressed
// layers) tagged ref, e.g. "ghcr.io/tern-gw/ternd:v0.1.0". `ctr images
// import`, `kind load image-archive`, `docker load` and `podman load` all
// read it. It returns an error if ref is not a valid tagged reference or the
// file cannot be written.
func WriteArchive(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("ociimage: %w", err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("ociimage: write %s: %w", path, err)
	}
	return nil
}
