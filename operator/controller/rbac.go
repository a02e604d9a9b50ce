package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tern-gw/tern/operator/render"
)

// dataplaneAccess returns what lets a Gateway's dataplane pods read their config through the
// API (dataplane/k8sconfig) instead of waiting for kubelet to sync the mounted ConfigMap: a
// ServiceAccount, a Role allowing get, list and watch of that one ConfigMap, and the
// RoleBinding between them, all named after the Gateway. It sets the Deployment's
// serviceAccountName unless render chose one, in which case the binding names that account
// (and the operator creates no ServiceAccount). It returns nil when there is no Deployment.
//
// list and watch are limited by resourceNames too: the API server honours that for requests
// with the field selector metadata.name=<name>, which is how k8sconfig watches.
func dataplaneAccess(g *render.GatewayResult) []client.Object {
	if g.Deployment == nil || g.ConfigMap == nil {
		return nil
	}
	pod := &g.Deployment.Spec.Template.Spec
	var out []client.Object
	if pod.ServiceAccountName == "" {
		pod.ServiceAccountName = g.Name
		out = append(out, &corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: accessMeta(g),
		})
	}
	out = append(out,
		&rbacv1.Role{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
			ObjectMeta: accessMeta(g),
			Rules: []rbacv1.PolicyRule{{
				APIGroups:     []string{""},
				Resources:     []string{"configmaps"},
				ResourceNames: []string{g.ConfigMap.Name},
				Verbs:         []string{"get", "list", "watch"},
			}},
		},
		&rbacv1.RoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
			ObjectMeta: accessMeta(g),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: g.Name},
			Subjects: []rbacv1.Subject{{
				Kind: rbacv1.ServiceAccountKind, Namespace: g.Namespace, Name: pod.ServiceAccountName,
			}},
		})
	return out
}

// accessMeta names an access object after the Gateway, with the Deployment's labels so that
// `kubectl get -l` finds it with the rest of the Gateway's objects.
func accessMeta(g *render.GatewayResult) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: g.Namespace, Name: g.Name, Labels: copyLabels(g.Deployment)}
}

func copyLabels(d *appsv1.Deployment) map[string]string {
	out := map[string]string{}
	for k, v := range d.Labels {
		out[k] = v
	}
	return out
}
