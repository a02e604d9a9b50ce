package testenv

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// gatewayAPIModule is the module whose zip carries the Gateway API CRDs.
const gatewayAPIModule = "sigs.k8s.io/gateway-api"

// GatewayAPICRDPaths returns the CRD files of the Gateway API version in go.mod: the standard
// channel, except UDPRoute, which comes from the experimental channel because only that one
// still serves gateway.networking.k8s.io/v1alpha2, the version STUNner's manifests use.
func GatewayAPICRDPaths() ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", gatewayAPIModule)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -m %s: %w", gatewayAPIModule, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return nil, fmt.Errorf("go list -m %s: module not downloaded", gatewayAPIModule)
	}
	crds := filepath.Join(dir, "config", "crd")
	std, err := filepath.Glob(filepath.Join(crds, "standard", "gateway.networking.k8s.io_*.yaml"))
	if err != nil || len(std) == 0 {
		return nil, fmt.Errorf("no Gateway API CRDs under %s", crds)
	}
	var paths []string
	for _, p := range std {
		base := filepath.Base(p)
		switch {
		case strings.Contains(base, "_vap_"): // an admission policy, not a CRD
		case strings.HasSuffix(base, "_udproutes.yaml"):
			paths = append(paths, filepath.Join(crds, "experimental", base))
		default:
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// DeployCRDPaths returns the CRD directories the operator is deployed with, deploy/crds: the
// stunner.l7mp.io CRDs and the Gateway API CRDs Tern ships.
func DeployCRDPaths() ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	crds := filepath.Join(root, "deploy", "crds")
	return []string{filepath.Join(crds, "gateway-api"), filepath.Join(crds, "stunner")}, nil
}

// MustDeployCRDPaths is DeployCRDPaths for a package's test environment
// variable: it panics when the repository cannot be found.
func MustDeployCRDPaths() []string {
	p, err := DeployCRDPaths()
	if err != nil {
		panic(err)
	}
	return p
}
