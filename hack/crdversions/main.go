// Command crdversions adds to each stunner.l7mp.io CRD file named on its
// command line a served, deprecated v1alpha1 version with the v1 schema.
// hack/generate.sh runs it after controller-gen.
//
// Why: clusters that ran STUNner before its v1 API list v1alpha1 in the
// storedVersions of its CRDs, and the API server refuses a CRD update that
// drops a stored version; so replacing STUNner's CRDs with Tern's would fail
// there. STUNner's v1alpha1 objects fit the v1 schema field for field
// (Tern's v1 types carry v1alpha1's fields too: GatewayConfig's minPort,
// maxPort, metricsEndpoint and healthCheckEndpoint, Dataplane's
// healthCheckPort, StaticService's ports; the renderer gives them their v1
// meaning), so the versions
// differ in name only and need no conversion webhook: the CRD's default
// conversion strategy, None, rewrites apiVersion alone.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

const (
	from = "v1"
	add  = "v1alpha1"
)

func main() {
	for _, path := range os.Args[1:] {
		if err := addVersion(path); err != nil {
			fmt.Fprintf(os.Stderr, "crdversions: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
}

func addVersion(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd map[string]any
	if err := yaml.Unmarshal(bytes.TrimPrefix(data, []byte("---\n")), &crd); err != nil {
		return err
	}
	spec, _ := crd["spec"].(map[string]any)
	versions, _ := spec["versions"].([]any)
	var base map[string]any
	for _, v := range versions {
		m, _ := v.(map[string]any)
		switch m["name"] {
		case add:
			return nil // already there: running twice changes nothing
		case from:
			base = m
		}
	}
	if base == nil {
		return fmt.Errorf("no version %s", from)
	}
	// A deep copy, so that the two versions do not share maps.
	raw, err := json.Marshal(base)
	if err != nil {
		return err
	}
	var alpha map[string]any
	if err := json.Unmarshal(raw, &alpha); err != nil {
		return err
	}
	alpha["name"] = add
	alpha["served"] = true
	alpha["storage"] = false
	alpha["deprecated"] = true
	alpha["deprecationWarning"] = fmt.Sprintf("%s/%s is deprecated; use %s/%s", spec["group"], add, spec["group"], from)
	spec["versions"] = append(versions, alpha)
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("---\n"), out...), 0o644)
}
