package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Apply creates or updates every object of a multi-document YAML or JSON text with
// server-side apply, as `kubectl apply --server-side` does, and returns the objects sent.
// Namespaced objects without a namespace go to "default", as with kubectl's default context.
// Annotation and label values given as bare booleans or numbers (the seeds write
// `enable-mixed-protocol-lb: true`) are sent as strings, as Tern's docs tell users to quote
// them: the API server rejects anything but strings there. It fails tb on any error.
func Apply(tb testing.TB, c client.Client, data []byte) []*unstructured.Unstructured {
	tb.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			tb.Fatal(err)
		}
		if m == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if md, ok := u.Object["metadata"].(map[string]any); ok {
			for _, f := range []string{"annotations", "labels"} {
				if vals, ok := md[f].(map[string]any); ok {
					for k, v := range vals {
						if _, ok := v.(string); !ok {
							vals[k] = fmt.Sprint(v)
						}
					}
				}
			}
		}
		if namespaced, err := c.IsObjectNamespaced(u); err != nil {
			tb.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		} else if namespaced && u.GetNamespace() == "" {
			u.SetNamespace("default")
		}
		if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner("test"), client.ForceOwnership); err != nil {
			tb.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		objs = append(objs, u)
	}
	return objs
}

// ImpersonatingKubeconfig writes a kubeconfig for the API server that acts as user (for
// example "system:serviceaccount:ns:name"), so a test sees exactly what RBAC grants that
// user. The file is removed when tb ends.
func (e *Env) ImpersonatingKubeconfig(tb testing.TB, user string) string {
	tb.Helper()
	kc, err := clientcmd.LoadFromFile(e.KubeconfigFile(tb))
	if err != nil {
		tb.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = user
	}
	path := filepath.Join(tb.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		tb.Fatalf("write kubeconfig: %v", err)
	}
	return path
}
