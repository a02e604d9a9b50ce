package v1_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// stunnerFields is testdata/stunner-fields.yaml: STUNner's CRD field
// paths and types per kind and version.
type stunnerFields struct {
	Kinds []struct {
		Kind     string `json:"kind"`
		CRD      string `json:"crd"`
		Versions map[string]struct {
			Fields   map[string]string `json:"fields"`
			Required []string          `json:"required"`
		} `json:"versions"`
	} `json:"kinds"`
	// Meaning maps a field, "<Kind>.<path>", to the golden case of
	// operator/render that shows Tern gives it STUNner's meaning.
	Meaning map[string]string `json:"meaning"`
}

// schemaNode is the part of an OpenAPI v3 schema the comparison reads.
type schemaNode struct {
	Type                 string                `json:"type"`
	IntOrString          bool                  `json:"x-kubernetes-int-or-string"`
	PreserveUnknown      bool                  `json:"x-kubernetes-preserve-unknown-fields"`
	Properties           map[string]schemaNode `json:"properties"`
	Items                *schemaNode           `json:"items"`
	AdditionalProperties *schemaNode           `json:"additionalProperties"`
	Required             []string              `json:"required"`
}

// flatten walks s into path -> type, as the data file spells them, and
// collects the required paths.
func flatten(s *schemaNode, path string, types map[string]string, required *[]string) {
	t := s.Type
	switch {
	case s.IntOrString:
		t = "int-or-string"
	case t == "" && s.PreserveUnknown:
		t = "any" // a Schemaless field: the API server takes any value
	}
	types[path] = t
	for _, r := range s.Required {
		*required = append(*required, path+"."+r)
	}
	for k, v := range s.Properties {
		flatten(&v, path+"."+k, types, required)
	}
	if s.Items != nil {
		flatten(s.Items, path+"[]", types, required)
	}
	if s.AdditionalProperties != nil {
		flatten(s.AdditionalProperties, path+"{}", types, required)
	}
}

// ternSpec returns the flattened spec schema of version in the CRD file
// path, or nil when the CRD does not serve that version.
func ternSpec(t *testing.T, path, version string) (types map[string]string, required []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Served bool   `json:"served"`
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]schemaNode `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != version || !v.Served {
			continue
		}
		spec, ok := v.Schema.OpenAPIV3Schema.Properties["spec"]
		if !ok {
			t.Fatalf("%s %s: no spec", path, version)
		}
		types = map[string]string{}
		flatten(&spec, "spec", types, &required)
		return types, required
	}
	return nil, nil
}

// TestStunnerFields: every field path of STUNner's v1 and v1alpha1 CRDs
// (testdata/stunner-fields.yaml) is in Tern's CRD of the same kind and
// version, in deploy/crds and in the Helm chart's copy, with the same type
// (a Schemaless field, which takes any value, accepts every type), and
// Tern requires no field STUNner does not. Where the meaning matters the
// data names the golden render case that shows it; that case must exist
// and set the field.
func TestStunnerFields(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "stunner-fields.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want stunnerFields
	if err := yaml.UnmarshalStrict(data, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Kinds) != 4 {
		t.Fatalf("testdata lists %d kinds, want 4", len(want.Kinds))
	}
	root := filepath.Join("..", "..", "..", "deploy")
	for _, dir := range []string{filepath.Join(root, "crds", "stunner"), filepath.Join(root, "helm", "tern", "crds")} {
		for _, k := range want.Kinds {
			for version, v := range k.Versions {
				t.Run(filepath.Base(filepath.Dir(dir))+"/"+k.Kind+"/"+version, func(t *testing.T) {
					types, required := ternSpec(t, filepath.Join(dir, k.CRD), version)
					if types == nil {
						t.Fatalf("%s does not serve %s", k.CRD, version)
					}
					if len(v.Fields) == 0 {
						t.Fatal("no fields listed")
					}
					for path, typ := range v.Fields {
						got, ok := types[path]
						switch {
						case !ok:
							t.Errorf("%s: missing (STUNner: %s)", path, typ)
						case got != typ && got != "any":
							t.Errorf("%s: type %s, STUNner's is %s", path, got, typ)
						}
					}
					for _, r := range required {
						if _, listed := v.Fields[r]; listed && !slices.Contains(v.Required, r) {
							t.Errorf("%s: required by Tern, optional in STUNner", r)
						}
					}
				})
			}
		}
	}

	golden := filepath.Join("..", "..", "render", "testdata")
	for field, tc := range want.Meaning {
		kind, path, _ := strings.Cut(field, ".")
		leaf := path[strings.LastIndexAny(path, ".")+1:]
		in, err := os.ReadFile(filepath.Join(golden, tc+".in.yaml"))
		if err != nil {
			t.Errorf("meaning of %s: %v", field, err)
			continue
		}
		if !strings.Contains(string(in), "kind: "+kind) || !strings.Contains(string(in), leaf+":") {
			t.Errorf("meaning of %s: golden case %s sets no %s of a %s", field, tc, leaf, kind)
		}
	}
}
