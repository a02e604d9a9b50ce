package render

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestConfigDiscoveryOrigin: CDS pods name the Service stunner-config-discovery of the
// operator's namespace by its ClusterIP and port (no cluster DNS needed), by its DNS name on
// the operator's port while it has no usable ClusterIP; -c and STUNNER_CONFIG_ORIGIN agree.
func TestConfigDiscoveryOrigin(t *testing.T) {
	svc := func(ns, ip string, ports ...corev1.ServicePort) corev1.Service {
		return corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: ConfigDiscoveryService, Namespace: ns},
			Spec:       corev1.ServiceSpec{ClusterIP: ip, Ports: ports},
		}
	}
	cds := corev1.ServicePort{Name: "cds", Port: 13478}
	for _, tc := range []struct {
		name     string
		services []corev1.Service
		opts     Options
		want     string
	}{
		{"no Service", nil, Options{}, "http://stunner-config-discovery.tern-system.svc:13478"},
		{"no Service, the operator's namespace and port", nil,
			Options{ConfigDiscoveryNamespace: "ops", ConfigDiscoveryPort: 14000}, "http://stunner-config-discovery.ops.svc:14000"},
		{"ClusterIP", []corev1.Service{svc("tern-system", "10.96.0.20", cds)}, Options{}, "http://10.96.0.20:13478"},
		{"ClusterIP, the Service's port", []corev1.Service{svc("ops", "10.96.0.20", corev1.ServicePort{Name: "metrics", Port: 8080}, corev1.ServicePort{Name: "cds", Port: 80})},
			Options{ConfigDiscoveryNamespace: "ops", ConfigDiscoveryPort: 14000}, "http://10.96.0.20:80"},
		{"ClusterIP, one unnamed port", []corev1.Service{svc("tern-system", "10.96.0.20", corev1.ServicePort{Port: 9000})}, Options{}, "http://10.96.0.20:9000"},
		{"IPv6 ClusterIP", []corev1.Service{svc("tern-system", "fd00:10:96::20", cds)}, Options{}, "http://[fd00:10:96::20]:13478"},
		{"no ClusterIP yet", []corev1.Service{svc("tern-system", "", cds)}, Options{}, "http://stunner-config-discovery.tern-system.svc:13478"},
		{"headless", []corev1.Service{svc("tern-system", corev1.ClusterIPNone, cds)}, Options{}, "http://stunner-config-discovery.tern-system.svc:13478"},
		{"no port to tell", []corev1.Service{svc("tern-system", "10.96.0.20", corev1.ServicePort{Name: "a", Port: 1}, corev1.ServicePort{Name: "b", Port: 2})},
			Options{}, "http://stunner-config-discovery.tern-system.svc:13478"},
		{"another namespace's", []corev1.Service{svc("stunner-system", "10.96.0.20", cds)}, Options{}, "http://stunner-config-discovery.tern-system.svc:13478"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := minimalInput()
			in.WithDefaultDataplane()
			in.Services = tc.services
			g := Render(in, tc.opts).Gateway("ns", "g")
			if g == nil || g.Deployment == nil {
				t.Fatal("Gateway g not rendered with a Deployment")
			}
			c := g.Deployment.Spec.Template.Spec.Containers[0]
			if i := slices.Index(c.Args, "-c"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != tc.want {
				t.Errorf("args %q, want -c %s", c.Args, tc.want)
			}
			var env string
			for _, e := range c.Env {
				if e.Name == EnvConfigOrigin {
					env = e.Value
				}
			}
			if env != tc.want {
				t.Errorf("%s %q, want %q", EnvConfigOrigin, env, tc.want)
			}
		})
	}
}
