package v1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/internal/testenv"
)

// bare is an API server without any CRD, on which a test installs STUNner's
// CRDs the way a cluster's history left them, before Tern's.
var bare = testenv.New(testenv.Options{})

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// upgradeCases are the kinds STUNner served as v1alpha1 before v1, with an
// object each as both versions write it (the same shape).
var upgradeCases = []struct {
	file, kind string
	namespaced bool
	spec       string
}{
	{"stunner.l7mp.io_gatewayconfigs.yaml", "GatewayConfig", true,
		`{realm: stunner.l7mp.io, authType: plaintext, userName: user-1, password: pass-1, logLevel: "all:INFO", minPort: 30000, maxPort: 32767}`},
	{"stunner.l7mp.io_staticservices.yaml", "StaticService", true, `{prefixes: ["192.0.2.0/24"]}`},
	{"stunner.l7mp.io_dataplanes.yaml", "Dataplane", false, `{image: "l7mp/stunnerd:latest", command: [stunnerd], args: [-w]}`},
}

// TestReplaceStunnerCRDs installs each CRD as a cluster that ran STUNner
// has it: first v1alpha1 alone (stored), with an object, then STUNner's v1
// (stored) beside it, with another; status.storedVersions then lists
// v1alpha1. Replacing the CRD with one that drops v1alpha1 is refused by
// the API server (what serving v1alpha1 is for, hack/crdversions); applying
// Tern's CRD from deploy/crds succeeds, and both objects stay readable as
// v1 and as v1alpha1, unchanged.
func TestReplaceStunnerCRDs(t *testing.T) {
	cfg := bare.Config(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &unstructured.Unstructured{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	ns.SetName("upgrade")
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	for _, tc := range upgradeCases {
		t.Run(tc.kind, func(t *testing.T) {
			path := filepath.Join("..", "..", "..", "deploy", "crds", "stunner", tc.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tern := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(data, &tern.Object); err != nil {
				t.Fatal(err)
			}
			group, _, _ := unstructured.NestedString(tern.Object, "spec", "group")
			v1, alpha := crdVersion(t, tern, "v1"), crdVersion(t, tern, "v1alpha1")
			if v1 == nil || alpha == nil {
				t.Fatalf("%s lacks v1 or v1alpha1", path)
			}
			// STUNner's versions: the same schema (hack/crdversions says
			// why), neither deprecated.
			stunner := func(name string, storage bool) map[string]any {
				v := deepCopy(t, alpha)
				v["name"], v["served"], v["storage"] = name, true, storage
				delete(v, "deprecated")
				delete(v, "deprecationWarning")
				return v
			}

			// 1. STUNner before v1: v1alpha1 alone, and an object stored as it.
			crd := &unstructured.Unstructured{Object: deepCopy(t, tern.Object)}
			delete(crd.Object, "status")
			setVersions(t, crd, stunner("v1alpha1", true))
			if err := c.Create(ctx, crd); err != nil {
				t.Fatalf("create STUNner's v1alpha1 CRD: %v", err)
			}
			waitEstablished(t, c, crd.GetName())
			makeObject(t, c, group, "v1alpha1", tc.kind, "stored-as-v1alpha1", tc.namespaced, tc.spec)

			// 2. STUNner's v1 beside it, stored, and an object stored as v1.
			updateVersions(t, c, crd.GetName(), stunner("v1alpha1", false), stunner("v1", true))
			waitEstablished(t, c, crd.GetName())
			makeObject(t, c, group, "v1", tc.kind, "stored-as-v1", tc.namespaced, tc.spec)
			if stored := storedVersions(t, c, crd.GetName()); !slices.Equal(stored, []string{"v1alpha1", "v1"}) {
				t.Fatalf("storedVersions %v, want [v1alpha1 v1] as in a cluster that ran STUNner", stored)
			}

			// 3. A CRD without v1alpha1 is refused while v1alpha1 is stored.
			err = tryVersions(c, crd.GetName(), deepCopy(t, v1))
			if err == nil || !strings.Contains(err.Error(), "storedVersions") {
				t.Fatalf("replacing the CRD with v1 alone: %v, want a refusal naming storedVersions", err)
			}

			// 4. Tern's CRD, applied as deploy/ is.
			testenv.Apply(t, c, data)
			waitEstablished(t, c, crd.GetName())
			got := getCRD(t, c, crd.GetName())
			var served []string
			vs, _, _ := unstructured.NestedSlice(got.Object, "spec", "versions")
			for _, v := range vs {
				m := v.(map[string]any)
				if m["storage"] == true {
					served = append(served, m["name"].(string)+"(storage)")
				} else {
					served = append(served, m["name"].(string))
				}
			}
			if want := []string{"v1(storage)", "v1alpha1"}; !slices.Equal(served, want) {
				t.Fatalf("after applying Tern's CRD: versions %v, want %v", served, want)
			}

			// 5. Both objects read as either version, as written.
			var wantSpec map[string]any
			if err := yaml.Unmarshal([]byte(tc.spec), &wantSpec); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"stored-as-v1alpha1", "stored-as-v1"} {
				for _, version := range []string{"v1", "v1alpha1"} {
					obj := &unstructured.Unstructured{}
					obj.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: version, Kind: tc.kind})
					key := client.ObjectKey{Name: name}
					if tc.namespaced {
						key.Namespace = "upgrade"
					}
					if err := c.Get(ctx, key, obj); err != nil {
						t.Fatalf("%s read as %s: %v", name, version, err)
					}
					if obj.GetAPIVersion() != group+"/"+version {
						t.Errorf("%s read as %s came back as %s", name, version, obj.GetAPIVersion())
					}
					// Every field written comes back the same; the schema's
					// defaults (GatewayConfig's dataplane: default) may join.
					spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
					got, want := normalize(t, spec), normalize(t, wantSpec)
					for k, v := range want {
						if !reflect.DeepEqual(got[k], v) {
							t.Errorf("%s read as %s: spec.%s = %v, want %v (spec %v)", name, version, k, got[k], v, spec)
						}
					}
				}
			}
		})
	}
}

func crdVersion(t *testing.T, crd *unstructured.Unstructured, name string) map[string]any {
	t.Helper()
	vs, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if m, ok := v.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	return nil
}

func setVersions(t *testing.T, crd *unstructured.Unstructured, versions ...map[string]any) {
	t.Helper()
	vs := make([]any, len(versions))
	for i, v := range versions {
		vs[i] = v
	}
	if err := unstructured.SetNestedSlice(crd.Object, vs, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
}

func getCRD(t *testing.T, c client.Client, name string) *unstructured.Unstructured {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(crdGVK)
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// tryVersions replaces the CRD's versions, as an update of the whole CRD.
func tryVersions(c client.Client, name string, versions ...map[string]any) error {
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(crdGVK)
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, crd); err != nil {
		return err
	}
	vs := make([]any, len(versions))
	for i, v := range versions {
		vs[i] = v
	}
	if err := unstructured.SetNestedSlice(crd.Object, vs, "spec", "versions"); err != nil {
		return err
	}
	return c.Update(context.Background(), crd)
}

func updateVersions(t *testing.T, c client.Client, name string, versions ...map[string]any) {
	t.Helper()
	if err := tryVersions(c, name, versions...); err != nil {
		t.Fatalf("update CRD %s: %v", name, err)
	}
}

func storedVersions(t *testing.T, c client.Client, name string) []string {
	t.Helper()
	s, _, _ := unstructured.NestedStringSlice(getCRD(t, c, name).Object, "status", "storedVersions")
	return s
}

// waitEstablished waits until the CRD's current versions are served, so
// that requests for them reach the new definition.
func waitEstablished(t *testing.T, c client.Client, name string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		crd := getCRD(t, c, name)
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, cond := range conds {
			m := cond.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("CRD %s not established: %v", name, conds)
	})
}

func makeObject(t *testing.T, c client.Client, group, version, kind, name string, namespaced bool, spec string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{}}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(spec), &m); err != nil {
		t.Fatal(err)
	}
	obj.Object["spec"] = m
	obj.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: version, Kind: kind})
	obj.SetName(name)
	if namespaced {
		obj.SetNamespace("upgrade")
	}
	// Discovery of a version just added can lag behind Established.
	testenv.Eventually(t, 30*time.Second, func() error { return c.Create(context.Background(), obj) })
}

func deepCopy(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// normalize gives numbers one type, whichever decoder read them.
func normalize(t *testing.T, m map[string]any) map[string]any { return deepCopy(t, m) }
