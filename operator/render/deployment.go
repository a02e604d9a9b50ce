package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config/offloadmode"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// Defaults of the Dataplane fields, from STUNner's reference.
const (
	defaultReplicas                      = 1
	defaultTerminationGracePeriodSeconds = 30
)

// dataplane renders the dataplane workload of gw from the Dataplane
// template dp: a DaemonSet (one pod per eligible node) when the Dataplane's
// dataplaneResource is DaemonSet, as STUNner's, else a Deployment of the
// Dataplane's replicas. Exactly one of the two is returned. Both run the
// same pods (podTemplate) and select them by the same labels, which the
// Service selects too, so switching kinds keeps the Service's endpoints.
//
// The workload carries the Gateway's labels (less those of labelFilter)
// and annotations (less kubectl's last-applied record), with ours winning
// on conflict; the pods carry the Dataplane's labels and annotations, not
// the Gateway's, as STUNner's, so that labelling a Gateway restarts no pod.
func (r *renderer) dataplane(gw *gwapiv1.Gateway, dp *stnrv1.Dataplane, listeners []*listenerState, tlsSecrets []string, creds *corev1.Secret) (*appsv1.Deployment, *appsv1.DaemonSet) {
	meta := objectMeta(gw)
	labels := map[string]string{}
	for k, v := range gw.Labels {
		if !slices.Contains(r.opts.LabelFilter, k) {
			labels[k] = v
		}
	}
	maps.Copy(labels, meta.Labels)
	meta.Labels = labels
	ann := maps.Clone(gw.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	delete(ann, lastAppliedAnnotation)
	maps.Copy(ann, meta.Annotations)
	meta.Annotations = ann

	selector := &metav1.LabelSelector{MatchLabels: selectorLabels(gw)}
	template := r.podTemplate(gw, dp, listeners, tlsSecrets, creds)
	if isDaemonSet(dp) {
		// spec.replicas means nothing to a DaemonSet: STUNner ignores it too.
		ds := &appsv1.DaemonSet{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
			ObjectMeta: meta,
			Spec:       appsv1.DaemonSetSpec{Selector: selector, Template: template},
		}
		if handsOver(dp) {
			ds.Spec.UpdateStrategy = surgeUpdate()
		}
		return nil, ds
	}
	replicas := int32(defaultReplicas)
	if dp.Spec.Replicas != nil {
		replicas = *dp.Spec.Replicas
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta,
		Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: selector, Template: template},
	}, nil
}

// isDaemonSet reports whether dp asks for a DaemonSet (spec.dataplaneResource).
func isDaemonSet(dp *stnrv1.Dataplane) bool {
	return dp.Spec.DataplaneResource != nil && *dp.Spec.DataplaneResource == DataplaneResourceDaemonSet
}

// podTemplate renders the dataplane pods of gw from the Dataplane template
// dp: one ternd container watching the config discovery service
// (configDiscoveryOrigin), with no config volume and no ServiceAccount token
// (with spec.configSource ConfigMap: reading the ConfigMap at ConfigPath
// and watching it through the API), with the
// listener ports, probes on HealthPort unless disabled, the metrics port
// when enabled, the TLS Secrets mounted under TLSDir and the credentials
// Secret creds (when not nil) at Options.CredentialsDir. The pods run as
// the ServiceAccount of dataplaneAccess, non-root with no capabilities
// unless the Dataplane says otherwise (security.go), with the Dataplane's
// resources or defaultRequests, and drain for the Dataplane's
// terminationGracePeriodSeconds (default 30) after SIGTERM. A DaemonSet
// on hostNetwork hands over on upgrade instead, with the offload on or off
// (withHandover).
func (r *renderer) podTemplate(gw *gwapiv1.Gateway, dp *stnrv1.Dataplane, listeners []*listenerState, tlsSecrets []string, creds *corev1.Secret) corev1.PodTemplateSpec {
	spec := &dp.Spec

	podLabels := map[string]string{}
	maps.Copy(podLabels, spec.Labels)
	maps.Copy(podLabels, objectLabels(gw)) // ours win: the selector depends on them
	podAnn := map[string]string{}
	maps.Copy(podAnn, spec.Annotations)
	maps.Copy(podAnn, objectAnnotations(gw))

	fromCDS := r.configFromCDS(dp)
	origin := ""
	if fromCDS {
		origin = r.configDiscoveryOrigin()
	}
	args := spec.Args
	if handsOver(dp) {
		args = withTakeoverArgs(args)
	}
	c := corev1.Container{
		Name:            ContainerName,
		Image:           spec.Image,
		ImagePullPolicy: pullPolicy(spec),
		Command:         spec.Command,
		Args:            withConfigOrigin(args, origin),
		EnvFrom:         spec.EnvFrom,
		Env:             mergeEnv(downwardEnv(gw, origin), spec.Env),
		Resources:       resources(spec.Resources),
	}
	if !fromCDS {
		c.VolumeMounts = []corev1.VolumeMount{{Name: "config", MountPath: ConfigDir, ReadOnly: true}}
	}
	for _, ls := range listeners {
		if ls.usable() {
			c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: int32(ls.port()), Protocol: ls.transport})
		}
	}
	lowPort := lowestPort(c.Ports)
	offloading := offloadEngine(dp) != offloadmode.None
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
	}
	if fromCDS {
		// The config comes over the network and the credentials from the
		// mounted Secret: the pods need no Kubernetes API credentials.
		pod.AutomountServiceAccountToken = ptr(false)
	} else {
		pod.Volumes = []corev1.Volume{{
			Name: "config",
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: gw.Name},
			}},
		}}
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

	if handsOver(dp) {
		withHandover(&pod, gw, spec)
	}

	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnn},
		Spec:       pod,
	}
}

// downwardEnv tells ternd who and where it is: the addresses behind the
// config's placeholders, and the ConfigMap to watch (Tern's variables);
// then the variables STUNner's operator sets for stunnerd, with its
// values (the config origin excepted: see EnvConfigOrigin). With a config
// discovery service origin ("" for the ConfigMap) there is no ConfigMap to
// watch and the origin is the service, as STUNner's pods have it.
func downwardEnv(gw *gwapiv1.Gateway, cdsOrigin string) []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	env := []corev1.EnvVar{
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		field("POD_IP", "status.podIP"),
		field("NODE_IP", "status.hostIP"),
		field("NODE_NAME", "spec.nodeName"),
	}
	origin := cdsOrigin
	if origin == "" {
		env = append(env, corev1.EnvVar{Name: "TERN_CONFIGMAP", Value: gw.Name})
		origin = ConfigOrigin
	}
	return append(env,
		field(EnvAddr, "status.podIP"),
		corev1.EnvVar{Name: EnvName, Value: gw.Name},
		corev1.EnvVar{Name: EnvNamespace, Value: gw.Namespace},
		field(EnvNodeName, "spec.nodeName"),
		corev1.EnvVar{Name: EnvConfigOrigin, Value: origin},
	)
}

// mergeEnv returns the rendered variables with the Dataplane's spec.env
// applied over them: a variable of the same name is replaced in place (the
// Dataplane's value wins, as in a pod where the later of two wins), the
// others appended in order. Kubernetes keys a container's env by name for
// server-side apply, so a duplicate name would make the apply fail.
func mergeEnv(rendered, user []corev1.EnvVar) []corev1.EnvVar {
	out := append([]corev1.EnvVar(nil), rendered...)
	at := map[string]int{}
	for i, e := range out {
		at[e.Name] = i
	}
	for _, e := range user {
		if i, ok := at[e.Name]; ok {
			out[i] = e
			continue
		}
		at[e.Name] = len(out)
		out = append(out, e)
	}
	return out
}

// withConfigOrigin is withConfigFlag with a config discovery service
// origin in place of ConfigPath, when origin is not "".
func withConfigOrigin(args []string, origin string) []string {
	out := withConfigFlag(args)
	if origin != "" && len(out) == len(args)+2 {
		out[len(out)-1] = origin
	}
	return out
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
