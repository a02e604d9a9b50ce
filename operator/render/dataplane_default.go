package render

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tern-gw/tern/internal/version"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// DefaultImageRepository is the repository of the ternd image the default
// Dataplane names.
const DefaultImageRepository = "ghcr.io/tern-gw/ternd"

// DefaultImage returns the ternd image of the default Dataplane:
// DefaultImageRepository tagged with this binary's version
// (internal/version.ImageTag), so a tern-operator or ternd built at version
// X renders ternd:X, the image `make images` built beside it; an unstamped
// build renders the tag "dev".
func DefaultImage() string {
	return DefaultImageRepository + ":" + version.ImageTag()
}

// DefaultDataplane returns the `default` Dataplane that deploy/ installs
// (deploy/dataplane/default.yaml; a test keeps the two equal but for the
// image tag, DefaultImage here and the tag deploy/ is set to there). Tools that
// render without a cluster, `tern-operator render` and `ternd -f`, use it
// when their input has no Dataplane of that name.
func DefaultDataplane() *stnrv1.Dataplane {
	return &stnrv1.Dataplane{
		TypeMeta:   metav1.TypeMeta{APIVersion: stnrv1.GroupVersion.String(), Kind: "Dataplane"},
		ObjectMeta: metav1.ObjectMeta{Name: DefaultDataplaneName},
		Spec: stnrv1.DataplaneSpec{
			Image:   DefaultImage(),
			Command: []string{"ternd"},
			Args:    []string{"-w", "--udp-thread-num=16"},
			Resources: &corev1.ResourceRequirements{
				Limits: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("2"),
					corev1.ResourceMemory: resource.MustParse("512Mi"),
				},
				Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("500m"),
					corev1.ResourceMemory: resource.MustParse("128Mi"),
				},
			},
			TerminationGracePeriodSeconds: ptr(int64(3600)),
			EnableMetricsEndpoint:         true,
		},
	}
}

// WithDefaultDataplane adds DefaultDataplane to in unless in has a
// Dataplane of that name already.
func (in *Input) WithDefaultDataplane() {
	for _, dp := range in.Dataplanes {
		if dp.Name == DefaultDataplaneName {
			return
		}
	}
	in.Dataplanes = append(in.Dataplanes, *DefaultDataplane())
}
