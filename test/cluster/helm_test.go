//go:build cluster

package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/tern-gw/tern/internal/testenv"
)

// The release the tests install, as `helm install tern deploy/helm/tern -n tern-system
// --create-namespace` would.
const (
	releaseName      = "tern"
	releaseNamespace = "tern-system"
	// dataplaneGrace is the default Dataplane's terminationGracePeriodSeconds in the tests:
	// how long a ternd pod with allocations left may drain after SIGTERM before the kubelet
	// kills it (the chart's default is STUNner's 3600).
	dataplaneGrace = 5 * time.Second
)

// helmConfig is Helm's action configuration against the cluster of KUBECONFIG, the release
// stored as a Secret in releaseNamespace (Helm's default driver). Helm's debug log goes to
// log, which the caller prints only when the action fails: a passing install or upgrade (one
// runs in many tests' cleanups) writes some twenty lines that would otherwise push a test's
// own failure out of the end of CI's output.
func helmConfig(t *testing.T, log *testenv.LockedBuffer) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, ns := os.Getenv("KUBECONFIG"), releaseNamespace
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, releaseNamespace, "secret", func(format string, v ...any) {
		fmt.Fprintf(log, "helm: "+format+"\n", v...)
	}); err != nil {
		t.Fatalf("helm: %v", err)
	}
	return cfg
}

// loadChart loads deploy/helm/tern from the working tree.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(repoRoot(t), "deploy", "helm", "tern"))
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return chrt
}

// chartValues are the values the tests install with: the images `make images` built, by
// their version tag (imported by hack/cluster.sh, never pulled), and a Dataplane that drains
// for dataplaneGrace at most (turnutils_uclient's channel numbers pass the default config).
func chartValues(tag string, hostNetwork bool) map[string]any {
	return map[string]any{
		"image": map[string]any{
			"tag":        tag,
			"pullPolicy": "Never",
		},
		"dataplane": map[string]any{
			"args":                          []any{"-w", "--udp-thread-num=16"},
			"terminationGracePeriodSeconds": int(dataplaneGrace / time.Second),
			"hostNetwork":                   hostNetwork,
		},
	}
}

// helmInstall installs the chart like `helm install --create-namespace --wait`: the CRDs
// first (Helm waits for them to be established), then the operator and the default Dataplane,
// and waits for the operator's Deployment to be ready.
func helmInstall(t *testing.T, vals map[string]any) *release.Release {
	t.Helper()
	var log testenv.LockedBuffer
	install := action.NewInstall(helmConfig(t, &log))
	install.ReleaseName, install.Namespace = releaseName, releaseNamespace
	install.CreateNamespace = true
	install.Wait, install.Timeout = true, 120*time.Second
	rel, err := install.Run(loadChart(t), vals)
	if err != nil {
		t.Fatalf("helm install %s deploy/helm/tern: %v\n%s", releaseName, err, log.String())
	}
	return rel
}

// helmUpgrade upgrades the release with vals, like `helm upgrade --wait` with the values given
// again in full.
func helmUpgrade(t *testing.T, vals map[string]any) *release.Release {
	t.Helper()
	var (
		rel *release.Release
		err error
		log testenv.LockedBuffer
	)
	// Helm reads the API server's discovery before it renders. Right after an aggregated API
	// (KEDA's external.metrics.k8s.io) comes up, or while its server stops, that discovery can
	// fail for a moment ("unable to retrieve the complete list of server APIs", helm/helm#6361);
	// such an upgrade changed nothing and is tried again.
	for attempt := 1; ; attempt++ {
		upgrade := action.NewUpgrade(helmConfig(t, &log))
		upgrade.Namespace = releaseNamespace
		upgrade.Wait, upgrade.Timeout = true, 120*time.Second
		rel, err = upgrade.Run(releaseName, loadChart(t), vals)
		if err == nil || attempt == 5 || !discoveryFailed(err) {
			break
		}
		t.Logf("helm upgrade (attempt %d): API discovery failed, trying again in 2s: %v", attempt, err)
		time.Sleep(2 * time.Second)
	}
	if err != nil {
		t.Fatalf("helm upgrade %s deploy/helm/tern: %v\n%s", releaseName, err, log.String())
	}
	if rel.Info == nil || rel.Info.Status != release.StatusDeployed {
		t.Fatalf("helm upgrade: release %s is %v, want deployed\n%s", releaseName, fmt.Sprint(rel.Info), log.String())
	}
	return rel
}

// discoveryFailed says whether err is Helm's failure to read the API server's discovery, which
// comes before Helm changes anything.
func discoveryFailed(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "unable to retrieve the complete list of server APIs") ||
		strings.Contains(msg, "could not get apiVersions from Kubernetes")
}
