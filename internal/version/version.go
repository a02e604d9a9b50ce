// Package version holds the version of the Tern binaries, stamped at link
// time by `make images` (and by anyone building releases):
//
//	go build -ldflags "-X github.com/tern-gw/tern/internal/version.Version=v0.1.0 \
//	    -X github.com/tern-gw/tern/internal/version.Revision=$(git rev-parse HEAD)"
package version

import "runtime/debug"

// Version is the release or `git describe` name of the build, e.g. v0.1.0 or
// v0.1.0-3-g1234abc-dirty; "dev" when not stamped.
var Version = "dev"

// Revision is the full git commit the build comes from. When not stamped it
// is read from the VCS information the go command records in the binary
// (absent under `go run` and in tests), else "unknown".
var Revision = ""

// Get returns Version and Revision, the latter filled in from the build info
// when the link did not stamp it.
func Get() (version, revision string) {
	if Revision != "" {
		return Version, Revision
	}
	revision = "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if modified && revision != "unknown" {
			revision += "-dirty"
		}
	}
	return Version, revision
}

// String returns "<program> <version> (<revision>)", the line --version prints.
func String(program string) string {
	v, r := Get()
	return program + " " + v + " (" + r + ")"
}

// ImageTag returns Version as a container image tag: characters an image tag
// cannot hold (anything but letters, digits, '_', '.' and '-', such as the
// '+' of a Go pseudo-version) become '-', and the result is cut to 128
// characters, the longest tag a registry accepts.
func ImageTag() string {
	return Tag(Version)
}

// Tag returns v as a valid image tag, as ImageTag does for Version, and
// "dev" for an empty v.
func Tag(v string) string {
	if v == "" {
		return "dev"
	}
	t := []byte(v[:min(len(v), 128)])
	for i, c := range t {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		case (c == '.' || c == '-') && i > 0:
		case i == 0:
			t[i] = '_' // a tag may not start with '.' or '-'
		default:
			t[i] = '-'
		}
	}
	return string(t)
}
