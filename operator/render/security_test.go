package render

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
)

// renderPod renders the Deployment of one Gateway with the given listener
// ports (TURN-UDP) from a Dataplane spec, and returns its pod spec.
func renderPod(t *testing.T, spec stnrv1.DataplaneSpec, ports ...int32) corev1.PodSpec {
	t.Helper()
	gw := &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw"}}
	var ls []*listenerState
	for _, p := range ports {
		ls = append(ls, &listenerState{
			l:        &gwapiv1.Listener{Name: "l", Port: gwapiv1.PortNumber(p), Protocol: "TURN-UDP"},
			protocol: "TURN-UDP", transport: corev1.ProtocolUDP, accepted: true, resolved: true,
		})
	}
	for _, l := range ls {
		if !l.usable() {
			t.Fatal("test listener is not usable; update renderPod")
		}
	}
	if spec.Image == "" {
		spec.Image = "ghcr.io/tern-gw/ternd:v0.1.0"
	}
	r := &renderer{}
	return r.podTemplate(gw, &stnrv1.Dataplane{Spec: spec}, ls, nil, nil).Spec
}

// NET_BIND_SERVICE is added only for a listener below 1024, and what lets
// the process bind there depends on the network namespace: a sysctl in its
// own, root with that one capability in the node's.
func TestPrivilegedPorts(t *testing.T) {
	tests := []struct {
		name        string
		ports       []int32
		hostNetwork bool
		wantAdd     []corev1.Capability
		wantUID     int64
		wantNonRoot bool
		wantSysctl  string // value of net.ipv4.ip_unprivileged_port_start, "" for none
	}{
		{name: "3478", ports: []int32{3478}, wantUID: 65532, wantNonRoot: true},
		{name: "1024", ports: []int32{1024}, wantUID: 65532, wantNonRoot: true},
		{name: "no listener", wantUID: 65532, wantNonRoot: true},
		{name: "3478 host network", ports: []int32{3478}, hostNetwork: true, wantUID: 65532, wantNonRoot: true},
		{name: "1023", ports: []int32{1023}, wantAdd: []corev1.Capability{"NET_BIND_SERVICE"}, wantUID: 65532, wantNonRoot: true, wantSysctl: "1023"},
		{name: "443 and 3478", ports: []int32{3478, 443, 853}, wantAdd: []corev1.Capability{"NET_BIND_SERVICE"}, wantUID: 65532, wantNonRoot: true, wantSysctl: "443"},
		{name: "443 host network", ports: []int32{443, 3478}, hostNetwork: true, wantAdd: []corev1.Capability{"NET_BIND_SERVICE"}, wantUID: 0, wantNonRoot: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := renderPod(t, stnrv1.DataplaneSpec{HostNetwork: tt.hostNetwork}, tt.ports...)
			c := pod.Containers[0].SecurityContext
			if c == nil || c.Capabilities == nil {
				t.Fatalf("container security context %+v", c)
			}
			if !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(c.Capabilities.Add, tt.wantAdd) {
				t.Errorf("capabilities drop %v add %v, want drop [ALL] add %v", c.Capabilities.Drop, c.Capabilities.Add, tt.wantAdd)
			}
			if *c.AllowPrivilegeEscalation || !*c.ReadOnlyRootFilesystem {
				t.Errorf("allowPrivilegeEscalation %v readOnlyRootFilesystem %v", *c.AllowPrivilegeEscalation, *c.ReadOnlyRootFilesystem)
			}
			p := pod.SecurityContext
			if *p.RunAsUser != tt.wantUID || *p.RunAsGroup != 65532 || *p.RunAsNonRoot != tt.wantNonRoot {
				t.Errorf("runAsUser %d runAsGroup %d runAsNonRoot %v, want %d 65532 %v", *p.RunAsUser, *p.RunAsGroup, *p.RunAsNonRoot, tt.wantUID, tt.wantNonRoot)
			}
			if p.SeccompProfile == nil || p.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("seccompProfile %+v", p.SeccompProfile)
			}
			var sysctl string
			for _, s := range p.Sysctls {
				if s.Name == "net.ipv4.ip_unprivileged_port_start" {
					sysctl = s.Value
				}
			}
			if sysctl != tt.wantSysctl || len(p.Sysctls) > 1 {
				t.Errorf("sysctls %v, want ip_unprivileged_port_start %q", p.Sysctls, tt.wantSysctl)
			}
		})
	}
}

// What a Dataplane sets wins field by field; what it leaves unset keeps the
// defaults.
func TestDataplaneSecurityWins(t *testing.T) {
	pod := renderPod(t, stnrv1.DataplaneSpec{
		SecurityContext: &corev1.PodSecurityContext{
			RunAsUser: ptr(int64(1000)),
			FSGroup:   ptr(int64(2000)),
			Sysctls:   []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
		},
		ContainerSecurityContext: &corev1.SecurityContext{
			ReadOnlyRootFilesystem: ptr(false),
			Capabilities:           &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}},
		},
	}, 80)
	p, c := pod.SecurityContext, pod.Containers[0].SecurityContext
	if *p.RunAsUser != 1000 || *p.FSGroup != 2000 || *p.RunAsGroup != 65532 || !*p.RunAsNonRoot || p.SeccompProfile == nil {
		t.Errorf("pod security context %+v", p)
	}
	if len(p.Sysctls) != 1 || p.Sysctls[0].Value != "0" {
		t.Errorf("sysctls %v: the Dataplane's value must stay alone", p.Sysctls)
	}
	if *c.ReadOnlyRootFilesystem || *c.AllowPrivilegeEscalation {
		t.Errorf("readOnlyRootFilesystem %v allowPrivilegeEscalation %v", *c.ReadOnlyRootFilesystem, *c.AllowPrivilegeEscalation)
	}
	if !slices.Equal(c.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) || len(c.Capabilities.Drop) != 0 {
		t.Errorf("capabilities %+v: the Dataplane's replace the defaults", c.Capabilities)
	}
}

func TestResources(t *testing.T) {
	pod := renderPod(t, stnrv1.DataplaneSpec{}, 3478)
	r := pod.Containers[0].Resources
	if r.Requests.Cpu().String() != "100m" || r.Requests.Memory().String() != "64Mi" || len(r.Limits) != 0 {
		t.Errorf("default resources %+v", r)
	}
	given := &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	pod = renderPod(t, stnrv1.DataplaneSpec{Resources: given}, 3478)
	r = pod.Containers[0].Resources
	if len(r.Requests) != 0 || r.Limits.Memory().String() != "1Gi" {
		t.Errorf("the Dataplane's resources were not used as given: %+v", r)
	}
	c := pod.Containers[0]
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/live" || c.LivenessProbe.HTTPGet.Port.IntValue() != HealthPort ||
		c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/ready" {
		t.Errorf("probes %+v %+v", c.LivenessProbe, c.ReadinessProbe)
	}
}
