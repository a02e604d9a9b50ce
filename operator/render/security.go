package render

import (
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The user and group ternd runs as: the non-root user of Tern's images
// (internal/ociimage), named in their /etc/passwd.
const (
	dataplaneUID = 65532
	dataplaneGID = 65532
)

// privilegedPortEnd is the first port an unprivileged process may bind
// under Linux's default net.ipv4.ip_unprivileged_port_start.
const privilegedPortEnd = 1024

// unprivilegedPortSysctl is the namespaced sysctl that lowers that bound in
// the pod's own network namespace; Kubernetes counts it as safe, so
// PodSecurity's restricted level and every kubelet allow it.
const unprivilegedPortSysctl = "net.ipv4.ip_unprivileged_port_start"

// Requests of a dataplane container whose Dataplane sets no resources: an
// idle ternd holds ~16 MB; the CPU request is what the scheduler reserves,
// not a cap (there is no limit).
var defaultRequests = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("100m"),
	corev1.ResourceMemory: resource.MustParse("64Mi"),
}

// lowestPort returns the lowest listener port of the container below
// privilegedPortEnd, or 0 if none is.
func lowestPort(ports []corev1.ContainerPort) int32 {
	low := int32(0)
	for _, p := range ports {
		if p.ContainerPort < privilegedPortEnd && (low == 0 || p.ContainerPort < low) {
			low = p.ContainerPort
		}
	}
	return low
}

// podSecurity returns the pod security context: user's when given, with
// each field it leaves unset filled from the defaults. The defaults run
// ternd as 65532:65532, non-root, under the runtime's default seccomp
// profile.
//
// A listener below port 1024 (lowPort > 0) needs more, because the
// capability NET_BIND_SERVICE that containerSecurity adds reaches only a
// root process: a container runtime grants no ambient capabilities, so a
// non-root process loses added ones when it starts. Instead:
//   - in the pod's own network namespace, the sysctl
//     net.ipv4.ip_unprivileged_port_start=lowPort lets 65532 bind it;
//   - with hostNetwork that sysctl would be the node's, which a pod may not
//     set, so ternd runs as root, with NET_BIND_SERVICE as its only
//     capability, no privilege escalation and a read-only root.
//
// The offload engine (offload true) needs BPF capabilities, which likewise
// reach only a root process: ternd then runs as root with the
// capabilities containerSecurity adds and no others.
func podSecurity(user *corev1.PodSecurityContext, hostNetwork bool, lowPort int32, offload bool) *corev1.PodSecurityContext {
	sc := &corev1.PodSecurityContext{}
	if user != nil {
		sc = user.DeepCopy()
	}
	uid, nonRoot := int64(dataplaneUID), true
	if (lowPort > 0 && hostNetwork) || offload {
		uid, nonRoot = 0, false
	}
	if sc.RunAsUser == nil {
		sc.RunAsUser = ptr(uid)
	}
	if sc.RunAsGroup == nil {
		sc.RunAsGroup = ptr(int64(dataplaneGID))
	}
	if sc.RunAsNonRoot == nil {
		sc.RunAsNonRoot = ptr(nonRoot)
	}
	if sc.SeccompProfile == nil {
		sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	if lowPort > 0 && !hostNetwork && !slices.ContainsFunc(sc.Sysctls, func(s corev1.Sysctl) bool { return s.Name == unprivilegedPortSysctl }) {
		sc.Sysctls = append(sc.Sysctls, corev1.Sysctl{Name: unprivilegedPortSysctl, Value: strconv.Itoa(int(lowPort))})
	}
	return sc
}

// offloadCapabilities are what the offload engine needs on Linux 6.x to
// load tc and XDP programs and their maps and attach them through
// bpf_links, measured on Linux 6.18 (ternd under setpriv with a bounding
// set of only these): BPF (bpf(2): programs, maps), NET_ADMIN (networking
// program types, tc/XDP attach) and PERFMON (without it the verifier
// applies its unprivileged rules and refuses the programs' pointer
// arithmetic and reads of partly initialized stack). SYS_ADMIN is not
// needed: the programs use plain hash, array and per-CPU maps.
var offloadCapabilities = []corev1.Capability{"BPF", "NET_ADMIN", "PERFMON"}

// containerSecurity returns the container security context: user's when
// given, with each field it leaves unset filled from the defaults: no
// privilege escalation, a read-only root filesystem, not privileged
// (said when offload is true), and every capability
// dropped but NET_BIND_SERVICE when a listener is below port 1024
// (lowPort > 0) and offloadCapabilities when the offload engine is
// requested (offload). A user's capabilities replace the defaults whole.
func containerSecurity(user *corev1.SecurityContext, lowPort int32, offload bool) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{}
	if user != nil {
		sc = user.DeepCopy()
	}
	if sc.AllowPrivilegeEscalation == nil {
		sc.AllowPrivilegeEscalation = ptr(false)
	}
	if sc.ReadOnlyRootFilesystem == nil {
		sc.ReadOnlyRootFilesystem = ptr(true)
	}
	if offload && sc.Privileged == nil {
		// Said, not left to the runtime's default (also false), so that
		// the rendered pod shows it gets its capabilities one by one.
		sc.Privileged = ptr(false)
	}
	if sc.Capabilities == nil {
		sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
		if lowPort > 0 {
			sc.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
		}
		if offload {
			sc.Capabilities.Add = append(sc.Capabilities.Add, offloadCapabilities...)
		}
	}
	return sc
}

// resources returns the Dataplane's resources as given, or defaultRequests
// when it sets none.
func resources(user *corev1.ResourceRequirements) corev1.ResourceRequirements {
	if user != nil {
		return *user.DeepCopy()
	}
	return corev1.ResourceRequirements{Requests: defaultRequests.DeepCopy()}
}
