package render

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// A DaemonSet dataplane on hostNetwork upgrades by hand-over
// (docs/operations.md, "Kubernetes: DaemonSet"): the DaemonSet surges one
// pod per node (maxSurge 1, maxUnavailable 0), the new pod's ternd
// takes the old one's TURN-UDP sockets and allocations over through a Unix
// socket on a hostPath both pods mount, and the old one waits, serving
// nothing new, until the DaemonSet controller deletes it.

// Where the hand-over socket lives: HandoverDir in the container (ternd's
// default admin.handoverSocket, /run/tern/ternd.sock, is in it), the
// node's HandoverHostDir/<namespace>/<gateway> under it, one per
// Gateway, so that two Gateways' pods on a node never meet.
const (
	HandoverDir     = "/run/tern"
	HandoverHostDir = "/run/tern"
	// handoverVolume names the hostPath volume and the init container
	// that makes it the pod's user's.
	handoverVolume = "handover"
)

// takeoverArgs are the ternd flags of a pod that hands over: take over
// from the pod before it on the node, or start when there is none, and
// after handing over stay up until the pod is deleted (a container that
// exited would be restarted, and take the sockets back).
var takeoverArgs = []string{"--takeover-or-start", "--after-handover=wait"}

// handsOver reports whether dp's pods upgrade by hand-over: a DaemonSet
// on hostNetwork (the pods of a node share its network namespace and the
// listener's address), with the kernel offload or without: its maps,
// programs and links travel by descriptor over the same Unix socket as
// the sockets, so the pod needs no bpffs mount beyond the capabilities
// the offload has anyway (docs/offload.md, "Upgrades").
func handsOver(dp *stnrv1.Dataplane) bool {
	return isDaemonSet(dp) && dp.Spec.HostNetwork
}

// surgeUpdate is the update strategy of a DaemonSet whose pods hand over:
// the new pod starts beside the old one on each node, one node at a time.
func surgeUpdate() appsv1.DaemonSetUpdateStrategy {
	one, zero := intstr.FromInt32(1), intstr.FromInt32(0)
	return appsv1.DaemonSetUpdateStrategy{
		Type:          appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: &one, MaxUnavailable: &zero},
	}
}

// withTakeoverArgs returns args with takeoverArgs after them, less those
// args sets already (the Dataplane's win).
func withTakeoverArgs(args []string) []string {
	out := slices.Clone(args)
	for _, a := range takeoverArgs {
		name, _, _ := strings.Cut(a, "=")
		if !slices.ContainsFunc(args, func(s string) bool { return s == name || strings.HasPrefix(s, name+"=") }) {
			out = append(out, a)
		}
	}
	return out
}

// withHandover makes pod (gw's, of a Dataplane that handsOver) hand over,
// its ternd's args having withTakeoverArgs: the hostPath volume
// mounted at HandoverDir, and an init container that makes that directory
// the ternd user's, mode 0700 (the kubelet makes a hostPath root's, 0755,
// and the socket must be reachable by that user only). The container
// declares no ports: on hostNetwork each is a host port, and the
// scheduler would not place the surge pod beside the old one that holds
// them (the probes name the health port by number).
func withHandover(pod *corev1.PodSpec, gw *gwapiv1.Gateway, spec *stnrv1.DataplaneSpec) {
	c := &pod.Containers[0]
	c.Ports = nil
	dirType := corev1.HostPathDirectoryOrCreate
	pod.Volumes = append(pod.Volumes, corev1.Volume{
		Name: handoverVolume,
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: HandoverHostDir + "/" + gw.Namespace + "/" + gw.Name, Type: &dirType,
		}},
	})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: handoverVolume, MountPath: HandoverDir})
	uid, gid := int64(dataplaneUID), int64(dataplaneGID)
	if sc := pod.SecurityContext; sc != nil {
		uid, gid = orInt64(sc.RunAsUser, uid), orInt64(sc.RunAsGroup, gid)
	}
	if sc := c.SecurityContext; sc != nil {
		uid, gid = orInt64(sc.RunAsUser, uid), orInt64(sc.RunAsGroup, gid)
	}
	pod.InitContainers = append(pod.InitContainers, corev1.Container{
		Name:            handoverVolume,
		Image:           c.Image,
		ImagePullPolicy: c.ImagePullPolicy,
		Command:         spec.Command,
		Args:            []string{"--prepare-handover-dir=" + HandoverDir, fmt.Sprintf("--handover-dir-owner=%d:%d", uid, gid)},
		VolumeMounts:    []corev1.VolumeMount{{Name: handoverVolume, MountPath: HandoverDir}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		// Root, for chown and chmod only: every other capability is
		// dropped.
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr(int64(0)),
			RunAsNonRoot:             ptr(false),
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN", "FOWNER"}},
		},
	})
}

// orInt64 is *p, or def when p is nil.
func orInt64(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}
