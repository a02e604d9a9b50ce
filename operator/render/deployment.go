package render

import (
	"fmt"
	"maps"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// Defaults of the Dataplane fields, from STUNner's reference.
const (
	defaultReplicas                      = 1
	defaultTerminationGracePeriodSeconds = 30
)

// deployment renders the dataplane Deployment of gw from the Dataplane
// template dp: one ternd container reading the ConfigMap at ConfigPath,
// with the listener ports, probes on HealthPort unless disabled, the
// metrics port when enabled, the TLS Secrets mounted under TLSDir and the
// credentials Secret creds (when not nil) at Options.CredentialsDir. Its
// pods run as the ServiceAccount of dataplaneAccess, non-root with no
// capabilities unless the Dataplane says otherwise (security.go), and with
// the Dataplane's resources or defaultRequests.
func (r *renderer) deployment(gw *gwapiv1.Gateway, dp *stnrv1.Dataplane, listeners []*listenerState, tlsSecrets []string, creds *corev1.Secret) *appsv1.Deployment {
	spec := &dp.Spec
	meta := objectMeta(gw)

	podLabels := map[string]string{}
	maps.Copy(podLabels, spec.Labels)
	maps.Copy(podLabels, objectLabels(gw)) // ours win: the selector depends on them
	var podAnn map[string]string
	if len(spec.Annotations) > 0 {
		podAnn = maps.Clone(spec.Annotations)
	}

	c := corev1.Container{
		Name:            ContainerName,
		Image:           spec.Image,
		ImagePullPolicy: pullPolicy(spec),
		Command:         spec.Command,
		Args:            withConfigFlag(spec.Args),
		EnvFrom:         spec.EnvFrom,
		Env:             append(downwardEnv(gw), spec.Env...),
		Resources:       resources(spec.Resources),
		VolumeMounts: []corev1.VolumeMount{{
			Name: "config", MountPath: ConfigDir, ReadOnly: true,
		}},
	}
	for _, ls := range listeners {
		if ls.usable() {
			c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: int32(ls.port()), Protocol: ls.transport})
		}
	}
	lowPort := lowestPort(c.Ports)
	offloading := offloadEngine(dp) != config.OffloadNone
	c.SecurityContext = containerSecurity(spec.ContainerSecurityContext, lowPort, offloading)
	if !spec.DisableHealthCheck {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: "health", ContainerPort: HealthPort, Protocol: corev1.ProtocolTCP})
		c.LivenessProbe = httpProbe("/live")
		c.ReadinessProbe = httpProbe("/ready")
	}
	if spec.EnableMetricsEndpoint {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: MetricsPortName, ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP})
	}

	pod := corev1.PodSpec{
		Containers:                    []corev1.Container{c},
		ServiceAccountName:            serviceAccountName(gw),
		HostNetwork:                   spec.HostNetwork,
		Affinity:                      spec.Affinity,
		Tolerations:                   spec.Tolerations,
		TopologySpreadConstraints:     spec.TopologySpreadConstraints,
		SecurityContext:               podSecurity(spec.SecurityContext, spec.HostNetwork, lowPort, offloading),
		ImagePullSecrets:              spec.ImagePullSecrets,
		TerminationGracePeriodSeconds: ptr(int64(defaultTerminationGracePeriodSeconds)),
		Volumes: []corev1.Volume{{
			Name: "config",
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: gw.Name},
			}},
		}},
	}
	if spec.HostNetwork {
		// Keep cluster DNS working from the host's network namespace.
		pod.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	}
	if spec.TerminationGracePeriodSeconds != nil {
		pod.TerminationGracePeriodSeconds = ptr(*spec.TerminationGracePeriodSeconds)
	}
	if creds != nil {
		pod.Volumes = append(pod.Volumes, corev1.Volume{
			Name:         "credentials",
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: creds.Name}},
		})
		pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts, corev1.VolumeMount{
			Name: "credentials", MountPath: r.opts.CredentialsDir, ReadOnly: true,
		})
	}
	for i, s := range tlsSecrets {
		vol := fmt.Sprintf("tls-%d", i)
		pod.Volumes = append(pod.Volumes, corev1.Volume{
			Name:         vol,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s}},
		})
		pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts, corev1.VolumeMount{
			Name: vol, MountPath: TLSDir + "/" + s, ReadOnly: true,
		})
	}

	replicas := int32(defaultReplicas)
	if spec.Replicas != nil {
		replicas = *spec.Replicas
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels(gw)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnn},
				Spec:       pod,
			},
		},
	}
}

// downwardEnv tells ternd who and where it is: the addresses behind the
// config's placeholders, and the ConfigMap to watch.
func downwardEnv(gw *gwapiv1.Gateway) []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return []corev1.EnvVar{
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		field("POD_IP", "status.podIP"),
		field("NODE_IP", "status.hostIP"),
		field("NODE_NAME", "spec.nodeName"),
		{Name: "TERN_CONFIGMAP", Value: gw.Name},
	}
}

// withConfigFlag appends "-c ConfigPath" to args unless they set -c already.
func withConfigFlag(args []string) []string {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "c" || name == "config") {
			return args
		}
	}
	out := append([]string(nil), args...)
	return append(out, "-c", ConfigPath)
}

// pullPolicy applies the reference's default: Always for a :latest or
// untagged image, IfNotPresent otherwise.
func pullPolicy(spec *stnrv1.DataplaneSpec) corev1.PullPolicy {
	if spec.ImagePullPolicy != nil && *spec.ImagePullPolicy != "" {
		return *spec.ImagePullPolicy
	}
	img := spec.Image
	if i := strings.Index(img, "@"); i >= 0 {
		return corev1.PullIfNotPresent // pinned by digest
	}
	last := img[strings.LastIndex(img, "/")+1:]
	if !strings.Contains(last, ":") || strings.HasSuffix(last, ":latest") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

func httpProbe(path string) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(HealthPort), Scheme: corev1.URISchemeHTTP,
		}},
		PeriodSeconds:    10,
		TimeoutSeconds:   1,
		SuccessThreshold: 1,
		FailureThreshold: 3,
	}
}
