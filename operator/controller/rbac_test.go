package controller

import (
	"fmt"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tern-gw/tern/operator/render"
)

func TestDataplaneAccess(t *testing.T) {
	result := func(withDeployment bool, sa string) *render.GatewayResult {
		g := &render.GatewayResult{Namespace: "stunner", Name: "udp-gateway",
			ConfigMap: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "stunner", Name: "udp-gateway"}}}
		if withDeployment {
			g.Deployment = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "stunner"}}}
			g.Deployment.Spec.Template.Spec.ServiceAccountName = sa
		}
		return g
	}
	tests := []struct {
		name      string
		in        *render.GatewayResult
		wantKinds []string
		wantSA    string // the Deployment's and the binding subject's account
	}{
		{"no Deployment, no access", result(false, ""), nil, ""},
		{"account created when render set none", result(true, ""), []string{"ServiceAccount", "Role", "RoleBinding"}, "udp-gateway"},
		{"render's account bound, none created", result(true, "ternd"), []string{"Role", "RoleBinding"}, "ternd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := dataplaneAccess(tt.in)
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind)
				if o.GetNamespace() != "stunner" || o.GetName() != "udp-gateway" || o.GetLabels()["app"] != "stunner" {
					t.Errorf("%T named %s/%s with labels %v", o, o.GetNamespace(), o.GetName(), o.GetLabels())
				}
				switch o := o.(type) {
				case *rbacv1.Role:
					want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
						ResourceNames: []string{"udp-gateway"}, Verbs: []string{"get", "list", "watch"}}}
					if !reflect.DeepEqual(o.Rules, want) {
						t.Errorf("role rules %+v, want %+v", o.Rules, want)
					}
				case *rbacv1.RoleBinding:
					if s := o.Subjects; len(s) != 1 || s[0].Name != tt.wantSA || s[0].Namespace != "stunner" {
						t.Errorf("binding subjects %+v, want service account stunner/%s", s, tt.wantSA)
					}
				}
			}
			if fmt.Sprint(kinds) != fmt.Sprint(tt.wantKinds) {
				t.Errorf("kinds %v, want %v", kinds, tt.wantKinds)
			}
			if d := tt.in.Deployment; d != nil && d.Spec.Template.Spec.ServiceAccountName != tt.wantSA {
				t.Errorf("Deployment serviceAccountName %q, want %q", d.Spec.Template.Spec.ServiceAccountName, tt.wantSA)
			}
		})
	}
}
