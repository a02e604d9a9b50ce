package render

import (
	"fmt"
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestDataplaneAccess: pods in ConfigMap mode read their ConfigMap through the API as their
// own ServiceAccount, which a Role lets read that one ConfigMap.
func TestDataplaneAccess(t *testing.T) {
	in := minimalInput()
	in.Gateways[0].UID = "gw-uid"
	in.WithDefaultDataplane()
	in.Dataplanes[0].Spec.ConfigSource = ConfigSourceConfigMap
	g := Render(in, Options{}).Gateway("ns", "g")
	if g == nil || g.Deployment == nil {
		t.Fatal("Gateway g not rendered with a Deployment")
	}
	var kinds []string
	for _, o := range g.Objects() {
		kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind)
	}
	if want := "[ServiceAccount Role RoleBinding Secret ConfigMap Service Deployment]"; fmt.Sprint(kinds) != want {
		t.Errorf("Objects() kinds %v, want %s (the pods' account before the pods)", kinds, want)
	}
	if sa := g.Deployment.Spec.Template.Spec.ServiceAccountName; sa != g.ServiceAccount.Name {
		t.Errorf("Deployment runs as %q, the rendered ServiceAccount is %q", sa, g.ServiceAccount.Name)
	}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
		ResourceNames: []string{g.ConfigMap.Name}, Verbs: []string{"get", "list", "watch"}}}
	if !reflect.DeepEqual(g.Role.Rules, wantRules) {
		t.Errorf("role rules %+v, want %+v", g.Role.Rules, wantRules)
	}
	b := g.RoleBinding
	wantSubjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "ns", Name: g.ServiceAccount.Name}}
	if b.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: g.Role.Name}) || !reflect.DeepEqual(b.Subjects, wantSubjects) {
		t.Errorf("binding %+v -> %+v, want role %s bound to %+v", b.RoleRef, b.Subjects, g.Role.Name, wantSubjects)
	}
	checkObjectsComplete(t, &in.Gateways[0], g)
}

// TestNoAccessWithoutDeployment: no pods, nothing to grant.
func TestNoAccessWithoutDeployment(t *testing.T) {
	g := Render(minimalInput(), Options{}).Gateway("ns", "g") // no Dataplane
	if g == nil || g.ConfigMap == nil || g.Deployment != nil {
		t.Fatal("want a ConfigMap and no Deployment")
	}
	if g.ServiceAccount != nil || g.Role != nil || g.RoleBinding != nil {
		t.Errorf("access rendered without a Deployment: %v %v %v", g.ServiceAccount, g.Role, g.RoleBinding)
	}
}

// TestNoRoleFromCDS: pods that take their config from the config discovery service (the
// default, unless the operator serves none) get no token and no Role or RoleBinding, only
// their own ServiceAccount; under disable-managed-dataplane the user's pods may still read the
// ConfigMap, so the Role stays.
func TestNoRoleFromCDS(t *testing.T) {
	const (
		fromCDS       = "[ServiceAccount Secret ConfigMap Service Deployment]"
		fromConfigMap = "[ServiceAccount Role RoleBinding Secret ConfigMap Service Deployment]"
	)
	for _, tc := range []struct {
		name      string
		source    string
		noCDS     bool // Options.NoConfigDiscovery
		unmanaged bool
		wantKinds string
	}{
		{"default", "", false, false, fromCDS},
		{"CDS", ConfigSourceCDS, false, false, fromCDS},
		{"ConfigMap", ConfigSourceConfigMap, false, false, fromConfigMap},
		{"default without a config discovery service", "", true, false, fromConfigMap},
		{"CDS without a config discovery service", ConfigSourceCDS, true, false, fromCDS},
		{"unmanaged", ConfigSourceCDS, false, true, "[ServiceAccount Role RoleBinding Secret ConfigMap Service]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := minimalInput()
			in.Gateways[0].UID = "gw-uid"
			if tc.unmanaged {
				in.Gateways[0].Annotations = map[string]string{AnnotationDisableManagedDataplane: "true"}
			}
			in.WithDefaultDataplane()
			in.Dataplanes[0].Spec.ConfigSource = tc.source
			g := Render(in, Options{NoConfigDiscovery: tc.noCDS}).Gateway("ns", "g")
			if g == nil || g.ConfigMap == nil {
				t.Fatal("Gateway g not rendered")
			}
			var kinds []string
			for _, o := range g.Objects() {
				kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind)
			}
			if fmt.Sprint(kinds) != tc.wantKinds {
				t.Errorf("Objects() kinds %v, want %s", kinds, tc.wantKinds)
			}
			if d := g.PodTemplate(); d != nil {
				a := d.Spec.AutomountServiceAccountToken
				if tokenless := a != nil && !*a; tokenless != (tc.wantKinds == fromCDS) {
					t.Errorf("pods automountServiceAccountToken %v, want false only from CDS", a)
				}
			}
			checkObjectsComplete(t, &in.Gateways[0], g)
		})
	}
}

// checkObjectsComplete fails unless every object of g is as the controller applies it:
// in the Gateway's namespace, labelled managed-by, controlled by gw (which prune and the
// controller's cache rely on), and the Deployment's account is one g renders.
func checkObjectsComplete(t *testing.T, gw *gwapiv1.Gateway, g *GatewayResult) {
	t.Helper()
	for _, o := range g.Objects() {
		what := fmt.Sprintf("Gateway %s/%s: %T %s/%s", g.Namespace, g.Name, o, o.GetNamespace(), o.GetName())
		if o.GetNamespace() != gw.Namespace || o.GetName() == "" {
			t.Errorf("%s: not named in the Gateway's namespace", what)
		}
		if o.GetLabels()[LabelManagedBy] != LabelManagedByValue {
			t.Errorf("%s: labels %v lack %s=%s", what, o.GetLabels(), LabelManagedBy, LabelManagedByValue)
		}
		if !metav1.IsControlledBy(o, gw) {
			t.Errorf("%s: owner references %+v do not name the Gateway as controller", what, o.GetOwnerReferences())
		}
		if o.GetObjectKind().GroupVersionKind().Kind == "" {
			t.Errorf("%s: no apiVersion/kind", what)
		}
	}
	if g.Deployment != nil && g.DaemonSet != nil {
		t.Errorf("Gateway %s/%s: both a Deployment and a DaemonSet rendered", g.Namespace, g.Name)
	}
	if d := g.PodTemplate(); d != nil && g.Config != nil {
		checkCredentialsMounted(t, g)
	}
	if d := g.PodTemplate(); d != nil {
		sa := g.ServiceAccount
		if sa == nil || d.Spec.ServiceAccountName != sa.Name {
			t.Errorf("Gateway %s/%s: the dataplane pods run as %q without the rendered ServiceAccount",
				g.Namespace, g.Name, d.Spec.ServiceAccountName)
		}
		// A token mounted means the pods read the ConfigMap through the API: they need the
		// Role; without one (config from CDS) they are granted nothing.
		tokenless := d.Spec.AutomountServiceAccountToken != nil && !*d.Spec.AutomountServiceAccountToken
		if granted := g.Role != nil && g.RoleBinding != nil; granted == tokenless {
			t.Errorf("Gateway %s/%s: pods with automountServiceAccountToken %v, Role and RoleBinding rendered: %v",
				g.Namespace, g.Name, !tokenless, granted)
		}
	}
}
