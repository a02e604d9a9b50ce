package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

// tenant is the Mimir tenant deploy/monitoring writes and queries as.
const tenant = "tern"

// mimirConfig runs Mimir as one process (target all) on 127.0.0.1 only,
// with filesystem storage under dir and every ring in memory: no gossip, no
// other member to wait for. Readiness waits are off, and the query
// frontend advertises 127.0.0.1 to the querier (its default is an address
// of a network interface, where the querier's connection back hangs).
const mimirConfig = `target: all
multitenancy_enabled: true
server:
  http_listen_address: 127.0.0.1
  http_listen_port: %[2]d
  grpc_listen_address: 127.0.0.1
  grpc_listen_port: %[3]d
  log_level: warn
memberlist:
  bind_addr: [127.0.0.1]
  bind_port: %[4]d
  advertise_addr: 127.0.0.1
common:
  storage:
    backend: filesystem
    filesystem:
      dir: %[1]s/common
blocks_storage:
  backend: filesystem
  filesystem:
    dir: %[1]s/blocks
  bucket_store:
    sync_dir: %[1]s/tsdb-sync
  tsdb:
    dir: %[1]s/tsdb
compactor:
  data_dir: %[1]s/compactor
  sharding_ring:
    kvstore: {store: inmemory}
    instance_addr: 127.0.0.1
distributor:
  ring:
    kvstore: {store: inmemory}
    instance_addr: 127.0.0.1
ingester:
  ring:
    kvstore: {store: inmemory}
    instance_addr: 127.0.0.1
    replication_factor: 1
    min_ready_duration: 0s
    final_sleep: 0s
    observe_period: 0s
store_gateway:
  sharding_ring:
    kvstore: {store: inmemory}
    instance_addr: 127.0.0.1
    replication_factor: 1
ruler:
  ring:
    kvstore: {store: inmemory}
    instance_addr: 127.0.0.1
ruler_storage:
  backend: filesystem
  filesystem:
    dir: %[1]s/rules
query_scheduler:
  ring:
    kvstore: {store: inmemory}
    instance_addr: 127.0.0.1
frontend:
  address: 127.0.0.1
`

// proc is a helper process the test started, stopped by PID when the test ends.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testenv.LockedBuffer
	done chan struct{}
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(args[0], args[1:]...), out: &testenv.LockedBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startMimir runs Grafana Mimir (built by hack/mimir.sh) and returns its
// base URL once /ready answers.
func startMimir(t *testing.T) string {
	t.Helper()
	bin := testenv.Mimir(t)
	dir := t.TempDir()
	httpPort, c1 := freePort(t, "tcp4")
	grpcPort, c2 := freePort(t, "tcp4")
	gossipPort, c3 := freePort(t, "tcp4")
	c1()
	c2()
	c3()
	cfg := filepath.Join(dir, "mimir.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, mimirConfig, filepath.Join(dir, "data"), httpPort, grpcPort, gossipPort), 0o600); err != nil {
		t.Fatal(err)
	}
	// Its activity log in the temporary directory, not Mimir's default ./metrics-activity.log
	// (this package's directory, where go test runs it).
	p := startProc(t, "mimir", bin, "-config.file="+cfg, "-activity-tracker.filepath="+filepath.Join(dir, "metrics-activity.log"))
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	testenv.Eventually(t, 30*time.Second, func() error {
		if p.exited() {
			t.Fatalf("mimir exited:\n%s", p.out.String())
		}
		code, body, err := httpGet(base + "/ready")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/ready: %d %s", code, strings.TrimSpace(body))
		}
		return err
	})
	return base
}

// startVmagent runs Debian's vmagent scraping target (host:port) every
// second and remote-writing to Mimir as tenant, the way
// deploy/monitoring/vmagent.yaml ships (its flags, a static target instead
// of Kubernetes discovery).
func startVmagent(t *testing.T, target, mimir string) {
	t.Helper()
	dir := t.TempDir()
	scrape := filepath.Join(dir, "scrape.yaml")
	if err := os.WriteFile(scrape, fmt.Appendf(nil, `global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tern-dataplane
    static_configs:
      - targets: [%q]
        labels: {namespace: stunner, pod: ternd-e2e}
`, target), 0o600); err != nil {
		t.Fatal(err)
	}
	httpPort, closeHTTP := freePort(t, "tcp4")
	closeHTTP()
	bin, err := exec.LookPath("vmagent")
	testenv.Require(t, "vmagent (Debian package victoria-metrics)", err)
	startProc(t, "vmagent", bin,
		"-promscrape.config="+scrape,
		"-remoteWrite.url="+mimir+"/api/v1/push",
		"-remoteWrite.headers=X-Scope-OrgID:"+tenant,
		"-remoteWrite.flushInterval=1s",
		"-remoteWrite.tmpDataPath="+filepath.Join(dir, "remotewrite"),
		"-httpListenAddr=127.0.0.1:"+strconv.Itoa(httpPort),
		"-loggerLevel=WARN")
}

// promResult is the body of a Prometheus API instant query.
type promResult struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

// kedaQuery does what KEDA's prometheus scaler does for the trigger: GET
// serverAddress + /api/v1/query with the query and the time (RFC 3339),
// with the trigger's custom headers, and read one value (no sample: 0, as
// with KEDA's default ignoreNullValues). It returns the value and the
// replicas KEDA asks the HPA for: ceil(value / threshold) within
// [min, max].
func kedaQuery(k kedaTrigger) (value float64, replicas int, err error) {
	u := fmt.Sprintf("%s/api/v1/query?query=%s&time=%s", k.serverAddress, url.QueryEscape(k.query),
		url.QueryEscape(time.Now().UTC().Format(time.RFC3339)))
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return 0, 0, err
	}
	for name, v := range k.headers {
		req.Header.Add(name, v)
	}
	res, err := httpClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, 0, err
	}
	if res.StatusCode/100 != 2 {
		return 0, 0, fmt.Errorf("status %d: %s", res.StatusCode, body)
	}
	var r promResult
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, 0, err
	}
	switch {
	case len(r.Data.Result) > 1:
		return 0, 0, fmt.Errorf("query %s returned %d elements", k.query, len(r.Data.Result))
	case len(r.Data.Result) == 1:
		if len(r.Data.Result[0].Value) < 2 {
			return 0, 0, fmt.Errorf("query %s: value %v", k.query, r.Data.Result[0].Value)
		}
		s, _ := r.Data.Result[0].Value[1].(string)
		if value, err = strconv.ParseFloat(s, 64); err != nil {
			return 0, 0, err
		}
	}
	threshold, err := strconv.ParseFloat(k.threshold, 64)
	if err != nil || threshold <= 0 {
		return 0, 0, fmt.Errorf("threshold %q", k.threshold)
	}
	replicas = min(max(int(math.Ceil(value/threshold)), k.min), k.max)
	return value, replicas, nil
}

// mimirQuery runs an instant query against Mimir's Prometheus API as org.
func mimirQuery(mimir, org, query string) (promResult, error) {
	var r promResult
	req, err := http.NewRequest(http.MethodGet, mimir+"/prometheus/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return r, err
	}
	req.Header.Set("X-Scope-OrgID", org)
	res, err := httpClient.Do(req)
	if err != nil {
		return r, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("status %d, body %q: %v", res.StatusCode, body, err)
	}
	if r.Status != "success" {
		return r, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	return r, nil
}

// TestMimirKEDA runs the path adopters run, with the real components on
// 127.0.0.1: a live ternd, Debian's vmagent scraping it and remote-writing
// to Grafana Mimir (monolithic, filesystem storage, multi-tenant), and the
// queries KEDA and the Grafana dashboard make. It allocates, sees
// sum(stunner_allocations_active) in Mimir and through KEDA's query shape,
// releases the allocations and sees it fall to 0.
func TestMimirKEDA(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("coturn has no STUNner metrics")
	}
	mimir := startMimir(t)
	s := startTernd(t, nil)
	startVmagent(t, strings.TrimPrefix(s.metricsURL, "http://"), mimir)

	const allocations = 3
	var relays []io.Closer
	for range allocations {
		relays = append(relays, newPionClient(t, s, testUser, testPassword).allocate(t))
	}
	s.waitMetric(t, "stunner_allocations_active", allocations, 5*time.Second)

	const query = "sum(stunner_allocations_active)"
	waitMimir := func(want float64) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() error {
			r, err := mimirQuery(mimir, tenant, query)
			if err != nil {
				return err
			}
			if len(r.Data.Result) != 1 {
				return fmt.Errorf("%s: %d series, want 1", query, len(r.Data.Result))
			}
			if got, _ := r.Data.Result[0].Value[1].(string); got != strconv.FormatFloat(want, 'f', -1, 64) {
				return fmt.Errorf("%s = %s, want %v", query, got, want)
			}
			return nil
		})
	}
	start := time.Now()
	waitMimir(allocations)
	t.Logf("Mimir shows %d allocations %v after they were made", allocations, time.Since(start).Round(100*time.Millisecond))

	// Tenants are apart: another org sees nothing.
	if r, err := mimirQuery(mimir, "someone-else", query); err != nil || len(r.Data.Result) != 0 {
		t.Errorf("tenant someone-else: %v, %+v; want an empty result", err, r.Data.Result)
	}

	// KEDA's request, from the ScaledObject of deploy/monitoring with the
	// server address pointed here.
	trig := keda(t)
	trig.serverAddress = strings.Replace(trig.serverAddress, "http://mimir.monitoring.svc:8080", mimir, 1)
	// With a threshold of one allocation per pod, KEDA would ask for one
	// replica per allocation.
	one := trig
	one.threshold, one.min = "1", 0
	// KEDA asks for the value at the current second (its time parameter
	// has no fraction), so it may see the previous scrape for a moment.
	wantKEDA := func(value float64, replicas, replicasAtOne int) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, func() error {
			v, r, err := kedaQuery(trig)
			if err != nil {
				return err
			}
			if v != value || r != replicas {
				return fmt.Errorf("KEDA: %s = %v, %d replicas; want %v, %d", trig.query, v, r, value, replicas)
			}
			if _, r, err = kedaQuery(one); err != nil || r != replicasAtOne {
				return fmt.Errorf("KEDA at threshold 1: %d replicas (%v), want %d", r, err, replicasAtOne)
			}
			return nil
		})
	}
	wantKEDA(allocations, max(trig.min, 1), allocations)
	t.Logf("KEDA: %s = %d at threshold %s: %d replicas (min %d, max %d); %d at threshold 1",
		trig.query, allocations, trig.threshold, max(trig.min, 1), trig.min, trig.max, allocations)

	// Every query of the Grafana dashboard runs.
	for _, p := range readDashboard(t).Panels {
		for _, q := range p.Targets {
			expr := strings.NewReplacer(`$namespace`, `.*`, `$__rate_interval`, `1m`).Replace(q.Expr)
			if _, err := mimirQuery(mimir, tenant, expr); err != nil {
				t.Errorf("dashboard panel %q: %s: %v", p.Title, expr, err)
			}
		}
	}

	// Release: the sum falls to 0, in Mimir and for KEDA.
	for _, r := range relays {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s.waitMetric(t, "stunner_allocations_active", 0, 5*time.Second)
	start = time.Now()
	waitMimir(0)
	t.Logf("Mimir shows 0 allocations %v after the release", time.Since(start).Round(100*time.Millisecond))
	wantKEDA(0, trig.min, 0)
}
