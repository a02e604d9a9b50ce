package render

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/tern-gw/tern/dataplane/config"
)

// selectorLabels select the dataplane pods of gw. They are part of the
// Deployment's immutable selector: never change them.
func selectorLabels(gw *gwapiv1.Gateway) map[string]string {
	return map[string]string{
		LabelApp:              LabelAppValue,
		LabelGatewayName:      gw.Name,
		LabelGatewayNamespace: gw.Namespace,
	}
}

// objectLabels label every object rendered for gw: the selector labels,
// Tern's app.kubernetes.io labels and STUNner's owned-by.
func objectLabels(gw *gwapiv1.Gateway) map[string]string {
	l := selectorLabels(gw)
	l[LabelManagedBy] = LabelManagedByValue
	l[LabelName] = LabelNameValue
	l[LabelInstance] = gw.Name
	l[LabelOwnedBy] = LabelOwnedByValue
	return l
}

// objectAnnotations annotate every object rendered for gw with the
// Gateway's namespace/name, as STUNner does.
func objectAnnotations(gw *gwapiv1.Gateway) map[string]string {
	return map[string]string{AnnotationRelatedGateway: gw.Namespace + "/" + gw.Name}
}

// objectMeta names an object after gw, in its namespace, owned by it so
// that deleting the Gateway garbage-collects the object.
func objectMeta(gw *gwapiv1.Gateway) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:        gw.Name,
		Namespace:   gw.Namespace,
		Labels:      objectLabels(gw),
		Annotations: objectAnnotations(gw),
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion:         gwapiv1.GroupVersion.String(),
			Kind:               "Gateway",
			Name:               gw.Name,
			UID:                gw.UID,
			Controller:         ptr(true),
			BlockOwnerDeletion: ptr(true),
		}},
	}
}

// configMap holds data, the marshalled dataplane config of gw, under
// ConfigKey.
func (r *renderer) configMap(gw *gwapiv1.Gateway, data []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(gw),
		Data:       map[string]string{ConfigKey: string(data)},
	}
}

// MarshalConfig returns cfg as the YAML document stored in the ConfigMap: its JSON
// (encoding/json, the field names of its json tags) written as YAML with sorted keys, the
// same bytes every time for the same config (jsonToYAML). It fails only if cfg does not
// marshal to JSON.
func MarshalConfig(cfg *config.Config) ([]byte, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("marshal dataplane config: %w", err)
	}
	data, err := jsonToYAML(js)
	if err != nil {
		return nil, fmt.Errorf("marshal dataplane config: %w", err)
	}
	return data, nil
}
