package render

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

func TestIsStunnerdImage(t *testing.T) {
	for img, want := range map[string]bool{
		"l7mp/stunnerd":                           true,
		"l7mp/stunnerd:latest":                    true,
		"docker.io/l7mp/stunnerd:1.1.0":           true,
		"registry:5000/mirror/stunnerd@sha256:ab": true,
		"stunnerd":                     true,
		"ghcr.io/tern-gw/ternd:v0.1.0": false,
		"l7mp/stunnerd-premium:1.0":    false,
		"stunnerd.io/ternd":            false,
	} {
		if got := isStunnerdImage(img); got != want {
			t.Errorf("isStunnerdImage(%q) = %v, want %v", img, got, want)
		}
	}
}

func TestSubstituteStunnerd(t *testing.T) {
	dp := &stnrv1.Dataplane{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: stnrv1.DataplaneSpec{
		Image: "l7mp/stunnerd:latest", Command: []string{"stunnerd"},
		Args: []string{"-w", "--udp-thread-num=16", "-l", "all:TRACE", "--log-format", "json"},
	}}
	got, msg := substituteStunnerd(dp)
	if got.Spec.Image != DefaultImage() || !slices.Equal(got.Spec.Command, []string{"ternd"}) {
		t.Errorf("image %q command %q, want %q [ternd]", got.Spec.Image, got.Spec.Command, DefaultImage())
	}
	if !slices.Equal(got.Spec.Args, dp.Spec.Args) {
		t.Errorf("args %q, want them unchanged", got.Spec.Args)
	}
	if dp.Spec.Image != "l7mp/stunnerd:latest" {
		t.Error("the input Dataplane was modified")
	}
	if !strings.Contains(msg, "stunnerd replaced by ternd") {
		t.Errorf("message %q", msg)
	}

	// Only the command: the image is the user's (a ternd build of theirs).
	dp2 := &stnrv1.Dataplane{Spec: stnrv1.DataplaneSpec{Image: "my/ternd:1", Command: []string{"/usr/bin/stunnerd"},
		Args: []string{"-w", "-c", "file:///etc/stunnerd/stunnerd.conf", "--config=cds://x"}}}
	got, msg = substituteStunnerd(dp2)
	if got.Spec.Image != "my/ternd:1" || !slices.Equal(got.Spec.Command, []string{"ternd"}) {
		t.Errorf("image %q command %q", got.Spec.Image, got.Spec.Command)
	}
	if !slices.Equal(got.Spec.Args, []string{"-w"}) || !strings.Contains(msg, "file:///etc/stunnerd/stunnerd.conf") {
		t.Errorf("args %q message %q: stunnerd's config flags should be dropped and named", got.Spec.Args, msg)
	}

	// A ternd Dataplane is returned as is.
	dp3 := DefaultDataplane()
	if got, msg := substituteStunnerd(dp3); got != dp3 || msg != "" {
		t.Errorf("ternd Dataplane substituted: %q", msg)
	}
}
