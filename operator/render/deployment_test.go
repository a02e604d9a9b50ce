package render

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// TestLabelFilter: Options.LabelFilter replaces STUNner's filter list (nil keeps it, empty
// copies every Gateway label), as STUNNER_GATEWAY_OPERATOR_LABEL_FILTER does; the operator's
// own labels win either way.
func TestLabelFilter(t *testing.T) {
	gwLabels := map[string]string{"team": "media", "argocd.argoproj.io/instance": "media", LabelManagedBy: "Helm"}
	tests := []struct {
		name    string
		filter  []string
		present []string
		absent  []string
	}{
		{"default", nil, []string{"team"}, []string{"argocd.argoproj.io/instance"}},
		{"empty copies all", []string{}, []string{"team", "argocd.argoproj.io/instance"}, nil},
		{"own list", []string{"team"}, []string{"argocd.argoproj.io/instance"}, []string{"team"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := minimalInput()
			in.Gateways[0].Labels = gwLabels
			in.Dataplanes = []stnrv1.Dataplane{{ObjectMeta: metav1.ObjectMeta{Name: DefaultDataplaneName},
				Spec: stnrv1.DataplaneSpec{Image: "ternd:test"}}}
			res := Render(in, Options{LabelFilter: tt.filter})
			g := res.Gateway(in.Gateways[0].Namespace, in.Gateways[0].Name)
			if g == nil || g.Deployment == nil {
				t.Fatalf("no Deployment rendered: %v", res.Problems)
			}
			l := g.Deployment.Labels
			for _, k := range tt.present {
				if l[k] != gwLabels[k] {
					t.Errorf("label %s = %q, want the Gateway's %q", k, l[k], gwLabels[k])
				}
			}
			for _, k := range tt.absent {
				if _, ok := l[k]; ok {
					t.Errorf("label %s copied, want it filtered", k)
				}
			}
			if l[LabelManagedBy] != LabelManagedByValue {
				t.Errorf("%s = %q, want the operator's %q", LabelManagedBy, l[LabelManagedBy], LabelManagedByValue)
			}
			if pod := g.Deployment.Spec.Template.Labels; pod["team"] != "" {
				t.Errorf("pod labels %v carry the Gateway's label", pod)
			}
		})
	}
}

// TestStunnerctlFindsPods: `stunnerctl status <gateway> -n <namespace>`
// lists the pods in the Gateway's namespace labelled app=stunner and with
// the related-gateway name and namespace labels (STUNner's keys), then
// port-forwards to port 8086 for /status: the rendered pods carry those
// labels, live in that namespace and serve the health endpoints on 8086.
func TestStunnerctlFindsPods(t *testing.T) {
	in := minimalInput()
	in.Dataplanes = []stnrv1.Dataplane{{ObjectMeta: metav1.ObjectMeta{Name: DefaultDataplaneName},
		Spec: stnrv1.DataplaneSpec{Image: "ternd:test"}}}
	gw := in.Gateways[0]
	g := Render(in, Options{}).Gateway(gw.Namespace, gw.Name)
	if g == nil || g.Deployment == nil || g.Config == nil {
		t.Fatal("no Deployment rendered")
	}
	if g.Deployment.Namespace != gw.Namespace {
		t.Errorf("Deployment in %q, want the Gateway's namespace %q", g.Deployment.Namespace, gw.Namespace)
	}
	want := map[string]string{
		"app":                                  "stunner",
		"stunner.l7mp.io/related-gateway-name": gw.Name,
		"stunner.l7mp.io/related-gateway-namespace": gw.Namespace,
	}
	for k, v := range want {
		if got := g.Deployment.Spec.Template.Labels[k]; got != v {
			t.Errorf("pod label %s = %q, want %q", k, got, v)
		}
	}
	if !strings.HasSuffix(g.Config.Admin.HealthAddress, ":8086") {
		t.Errorf("health address %q, want port 8086 (stunnerctl's --pod-port default)", g.Config.Admin.HealthAddress)
	}
	var health bool
	for _, p := range g.Deployment.Spec.Template.Spec.Containers[0].Ports {
		health = health || p.ContainerPort == 8086
	}
	if !health {
		t.Errorf("container ports %v, want 8086", g.Deployment.Spec.Template.Spec.Containers[0].Ports)
	}
}
