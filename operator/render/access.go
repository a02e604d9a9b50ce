package render

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// serviceAccountName is the ServiceAccount the dataplane pods of gw run as.
func serviceAccountName(gw *gwapiv1.Gateway) string { return gw.Name }

// dataplaneAccess renders what lets the dataplane pods of gw read their config through the
// API (dataplane/k8sconfig, ternd --configmap) instead of waiting up to a minute for kubelet
// to sync the mounted ConfigMap: the ServiceAccount the Deployment runs as, a Role allowing
// get, list and watch of the one ConfigMap named configMap, and the RoleBinding between them.
// All are named after gw, labelled and owned like the rest of its objects.
//
// list and watch are limited by resourceNames too: the API server honours that for requests
// with the field selector metadata.name=<name>, which is how k8sconfig watches, so the pods
// can read no other ConfigMap.
//
// When the pods do not read the ConfigMap (readsConfigMap false: they take their config from
// the config discovery service, the default, and get no ServiceAccount token) the Role and
// RoleBinding are nil:
// there is nothing to grant. The ServiceAccount stays, bound to nothing, so that the pods keep
// an identity of their own rather than share the namespace's default account, whose grants
// Tern does not control, and a switch of configSource changes no pod's account.
func dataplaneAccess(gw *gwapiv1.Gateway, configMap string, readsConfigMap bool) (*corev1.ServiceAccount, *rbacv1.Role, *rbacv1.RoleBinding) {
	sa := &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: objectMeta(gw),
	}
	sa.Name = serviceAccountName(gw)
	if !readsConfigMap {
		return sa, nil, nil
	}
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: objectMeta(gw),
		Rules: []rbacv1.PolicyRule{{
			APIGroups:     []string{""},
			Resources:     []string{"configmaps"},
			ResourceNames: []string{configMap},
			Verbs:         []string{"get", "list", "watch"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: objectMeta(gw),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{
			Kind: rbacv1.ServiceAccountKind, Namespace: gw.Namespace, Name: sa.Name,
		}},
	}
	return sa, role, binding
}
