package render

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

func TestPullPolicy(t *testing.T) {
	always, never := corev1.PullAlways, corev1.PullNever
	tests := []struct {
		image  string
		policy *corev1.PullPolicy
		want   corev1.PullPolicy
	}{
		{"l7mp/stunnerd:latest", nil, corev1.PullAlways},
		{"l7mp/stunnerd", nil, corev1.PullAlways},
		{"registry:5000/ternd", nil, corev1.PullAlways},
		{"registry:5000/ternd:1.0", nil, corev1.PullIfNotPresent},
		{"ghcr.io/tern-gw/ternd@sha256:abc", nil, corev1.PullIfNotPresent},
		{"ternd:1.0", &always, corev1.PullAlways},
		{"ternd:latest", &never, corev1.PullNever},
	}
	for _, tt := range tests {
		got := pullPolicy(&stnrv1.DataplaneSpec{Image: tt.image, ImagePullPolicy: tt.policy})
		if got != tt.want {
			t.Errorf("pullPolicy(%q, %v) = %s, want %s", tt.image, tt.policy, got, tt.want)
		}
	}
}

func TestWithConfigFlag(t *testing.T) {
	tests := []struct {
		args, want []string
	}{
		{nil, []string{"-c", ConfigPath}},
		{[]string{"-w", "--udp-thread-num=16"}, []string{"-w", "--udp-thread-num=16", "-c", ConfigPath}},
		{[]string{"-c", "/x.yaml"}, []string{"-c", "/x.yaml"}},
		{[]string{"--c=/x.yaml"}, []string{"--c=/x.yaml"}},
		{[]string{"--config", "/x.yaml"}, []string{"--config", "/x.yaml"}},
		{[]string{"-cpu"}, []string{"-cpu", "-c", ConfigPath}},
	}
	for _, tt := range tests {
		if got := withConfigFlag(tt.args); !slices.Equal(got, tt.want) {
			t.Errorf("withConfigFlag(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}
