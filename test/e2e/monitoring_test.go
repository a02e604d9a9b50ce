package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/render"
)

// monitoringDocs reads a multi-document manifest of deploy/monitoring into
// generic maps.
func monitoringDocs(t *testing.T, file string) []map[string]any {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "monitoring", file))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
	return out
}

// dig walks a generic object by map keys and slice indexes.
func dig(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not an object at %q", path, k)
			}
			v = m[k]
		case int:
			s, ok := v.([]any)
			if !ok || k >= len(s) {
				t.Fatalf("%v: no element %d", path, k)
			}
			v = s[k]
		}
	}
	return v
}

func kindOf(t *testing.T, docs []map[string]any, kind string) map[string]any {
	t.Helper()
	for _, d := range docs {
		if d["kind"] == kind {
			return d
		}
	}
	t.Fatalf("no %s", kind)
	return nil
}

// TestMonitoringManifests checks deploy/monitoring against what Tern
// renders for the adopter's Gateway (deploy/examples/openova-stunner.yaml):
// the PodMonitor and ServiceMonitor select its pods and their metrics port,
// the KEDA ScaledObject targets its Deployment and queries Mimir's
// Prometheus API with the tenant vmagent writes as, and vmagent's scrape
// config passes vmagent's own check.
func TestMonitoringManifests(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "examples", "openova-stunner.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	in, _, err := render.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	in.WithDefaultDataplane()
	in.WithPlaceholders()
	res := render.Render(in, render.Options{ControllerName: render.DefaultControllerName})
	if len(res.Gateways) != 1 || res.Gateways[0].Deployment == nil {
		t.Fatalf("rendering the adopter's Gateway: %d gateways, problems %v", len(res.Gateways), res.Problems)
	}
	dep := res.Gateways[0].Deployment
	var ports []string
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		ports = append(ports, p.Name)
	}
	if !slices.Contains(ports, "metrics-port") {
		t.Fatalf("rendered Deployment's ports %q lack metrics-port", ports)
	}
	podLabels := dep.Spec.Template.Labels

	pm := kindOf(t, monitoringDocs(t, "podmonitor.yaml"), "PodMonitor")
	if got := dig(t, pm, "spec", "podMetricsEndpoints", 0, "port"); got != "metrics-port" {
		t.Errorf("PodMonitor port %v, want metrics-port", got)
	}
	for k, v := range dig(t, pm, "spec", "selector", "matchLabels").(map[string]any) {
		if podLabels[k] != v {
			t.Errorf("PodMonitor selects %s=%v; the rendered pods have %q", k, v, podLabels[k])
		}
	}

	sm := monitoringDocs(t, "servicemonitor.yaml")
	svc := kindOf(t, sm, "Service")
	if got := dig(t, svc, "spec", "ports", 0, "targetPort"); got != "metrics-port" {
		t.Errorf("metrics Service targetPort %v, want metrics-port", got)
	}
	for k, v := range dig(t, svc, "spec", "selector").(map[string]any) {
		if podLabels[k] != v {
			t.Errorf("metrics Service selects %s=%v; the rendered pods have %q", k, v, podLabels[k])
		}
	}
	if ns := dig(t, svc, "metadata", "namespace"); ns != dep.Namespace {
		t.Errorf("metrics Service in namespace %v, the Deployment in %s", ns, dep.Namespace)
	}
	if got, want := dig(t, kindOf(t, sm, "ServiceMonitor"), "spec", "endpoints", 0, "port"), dig(t, svc, "spec", "ports", 0, "name"); got != want {
		t.Errorf("ServiceMonitor port %v, the Service's %v", got, want)
	}

	so := kindOf(t, monitoringDocs(t, "keda-scaledobject.yaml"), "ScaledObject")
	if name, ns := dig(t, so, "spec", "scaleTargetRef", "name"), dig(t, so, "metadata", "namespace"); name != dep.Name || ns != dep.Namespace {
		t.Errorf("ScaledObject targets %v/%v, Tern renders Deployment %s/%s", ns, name, dep.Namespace, dep.Name)
	}
	trig := keda(t)
	if trig.serverAddress != "http://mimir.monitoring.svc:8080/prometheus" || trig.query != "sum(stunner_allocations_active)" {
		t.Errorf("ScaledObject trigger %+v", trig)
	}

	vm := monitoringDocs(t, "vmagent.yaml")
	args := dig(t, kindOf(t, vm, "Deployment"), "spec", "template", "spec", "containers", 0, "args").([]any)
	for _, want := range []string{"-remoteWrite.url=http://mimir.monitoring.svc:8080/api/v1/push", "-remoteWrite.headers=X-Scope-OrgID:" + trig.headers["X-Scope-OrgID"]} {
		if !slices.Contains(args, any(want)) {
			t.Errorf("vmagent args %v lack %s", args, want)
		}
	}
	scrape := dig(t, kindOf(t, vm, "ConfigMap"), "data", "scrape.yaml").(string)
	if !strings.Contains(scrape, "regex: metrics-port") || !strings.Contains(scrape, "regex: stunner") {
		t.Errorf("vmagent scrape config does not select app=stunner pods' metrics-port:\n%s", scrape)
	}
	vmagent, err := exec.LookPath("vmagent")
	testenv.Require(t, "vmagent (Debian package victoria-metrics; hack/mimir.sh installs it)", err)
	path := filepath.Join(t.TempDir(), "scrape.yaml")
	if err := os.WriteFile(path, []byte(scrape), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(vmagent, "-promscrape.config="+path, "-promscrape.config.dryRun",
		"-promscrape.config.strictParse", "-loggerLevel=ERROR").CombinedOutput(); err != nil {
		t.Errorf("vmagent rejects deploy/monitoring/vmagent.yaml's scrape config: %v\n%s", err, out)
	}

	rw := monitoringDocs(t, "prometheus-remote-write.yaml")[0]
	if got := dig(t, rw, "prometheus", "prometheusSpec", "remoteWrite", 0, "url"); got != "http://mimir.monitoring.svc:8080/api/v1/push" {
		t.Errorf("Prometheus remoteWrite url %v", got)
	}
	if got := dig(t, rw, "prometheus", "prometheusSpec", "remoteWrite", 0, "headers", "X-Scope-OrgID"); got != trig.headers["X-Scope-OrgID"] {
		t.Errorf("Prometheus remoteWrite tenant %v, KEDA's %v", got, trig.headers["X-Scope-OrgID"])
	}
}

// kedaTrigger is the prometheus trigger of deploy/monitoring/keda-scaledobject.yaml.
type kedaTrigger struct {
	serverAddress, query, threshold string
	headers                         map[string]string
	min, max                        int
}

func keda(t *testing.T) kedaTrigger {
	t.Helper()
	so := kindOf(t, monitoringDocs(t, "keda-scaledobject.yaml"), "ScaledObject")
	md := dig(t, so, "spec", "triggers", 0, "metadata").(map[string]any)
	if typ := dig(t, so, "spec", "triggers", 0, "type"); typ != "prometheus" {
		t.Fatalf("trigger type %v", typ)
	}
	k := kedaTrigger{headers: map[string]string{}}
	k.serverAddress, _ = md["serverAddress"].(string)
	k.query, _ = md["query"].(string)
	k.threshold, _ = md["threshold"].(string)
	// KEDA's customHeaders: name=value pairs separated by commas.
	if h, _ := md["customHeaders"].(string); h != "" {
		for _, kv := range strings.Split(h, ",") {
			name, value, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				t.Fatalf("customHeaders %q: %q is not name=value", h, kv)
			}
			k.headers[name] = value
		}
	}
	k.min = int(dig(t, so, "spec", "minReplicaCount").(float64))
	k.max = int(dig(t, so, "spec", "maxReplicaCount").(float64))
	if k.headers["X-Scope-OrgID"] == "" {
		t.Fatal("the ScaledObject sends no X-Scope-OrgID: a multi-tenant Mimir refuses its queries")
	}
	return k
}
