package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/dataplane/cdsclient"
	"github.com/tern-gw/tern/internal/testenv"
	stnrv1 "github.com/tern-gw/tern/operator/api/v1"
	"github.com/tern-gw/tern/operator/cds"
	"github.com/tern-gw/tern/operator/render"
)

// Issue 26's config at scale: 50 Gateways, 1,000 UDPRoutes (20 per Gateway, each to a Service of
// its own) and 10,000 backend endpoints (an EndpointSlice of 10 per Service), against a real
// kube-apiserver with the operator as tern-operator runs it (no throttle timeout: an
// EndpointSlice change renders the Gateways that read its Service's slices, and a full render
// follows once the changes settle).
const (
	scaleGateways       = 50
	scaleRoutesPerGW    = 20
	scaleEndpointsPerSv = 10
	scaleQuietChanges   = 20
	scaleBurstChanges   = 100
)

// BenchmarkConfigAtScale measures how long an EndpointSlice change takes to reach its
// Gateway's rendered config, by both ways a dataplane pod gets it: over the config discovery
// service (CDS, the default config source: a WebSocket watch per Gateway, as ternd's) and
// through the Gateway's ConfigMap (what a ConfigMap-mode dataplane watches; the same render
// step writes both, the CDS config before the objects are applied), one change at a time on a
// quiet operator and in a burst of scaleBurstChanges issued back to back, and the operator's
// CPU time (this process's, which the operator dominates: the API server and etcd are
// processes of their own, whose CPU time the burst's log line gives) and renders per change.
// It runs once whatever b.N is:
//
//	KUBEBUILDER_ASSETS=$(hack/envtest.sh) go test -run '^$' -bench ConfigAtScale -benchtime 1x ./operator/controller/
//
// Reported: quiet-p50-ms, quiet-p99-ms, burst-p50-ms, burst-p99-ms (milliseconds from the
// EndpointSlice update's return to the ConfigMap watch event carrying the new endpoint), the
// same as cds-quiet-p50-ms ... cds-burst-p99-ms (to the CDS message carrying it),
// cpu-ms/change, renders/change (burst), heap-MB (in use after the objects are loaded).
func BenchmarkConfigAtScale(b *testing.B) {
	c := op.start(b)
	const ns = "scale"
	testenv.Apply(b, c, []byte(fmt.Sprintf(scaleYAML, ns)))
	start := time.Now()
	loadScaleObjects(b, c, ns)
	b.Logf("created %d Gateways, %d UDPRoutes, %d Services and EndpointSlices (%d endpoints) in %v",
		scaleGateways, scaleGateways*scaleRoutesPerGW, scaleGateways*scaleRoutesPerGW,
		scaleGateways*scaleRoutesPerGW*scaleEndpointsPerSv, time.Since(start).Round(time.Millisecond))

	cs := kubernetes.NewForConfigOrDie(env.Config(b))
	w, cw := watchConfigs(b, cs, ns), watchCDS(b, ns)
	// Every Gateway's config holds its last endpoint, in its ConfigMap and over CDS.
	testenv.Eventually(b, 5*time.Minute, func() error {
		for g := range scaleGateways {
			last := endpointIP(g, scaleRoutesPerGW-1, scaleEndpointsPerSv-1)
			if !w.has(gwName(g), last) || !cw.has(gwName(g), last) {
				return fmt.Errorf("gateway %s: config without %s yet (ConfigMap %v, CDS %v)", gwName(g), last, w.has(gwName(g), last), cw.has(gwName(g), last))
			}
		}
		return nil
	})
	b.Logf("all %d configs rendered %v after the first object", scaleGateways, time.Since(start).Round(time.Millisecond))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)

	// The full renders that follow loading the objects write the statuses of 1,000 routes,
	// which takes seconds; the changes are timed once every route has its status. One change
	// first, not counted.
	testenv.Eventually(b, 5*time.Minute, func() error {
		var routes stnrv1.UDPRouteList
		if err := c.List(context.Background(), &routes, client.InNamespace(ns)); err != nil {
			return err
		}
		n := 0
		for _, rt := range routes.Items {
			if len(rt.Status.Parents) > 0 {
				n++
			}
		}
		if n < scaleGateways*scaleRoutesPerGW {
			return fmt.Errorf("%d of %d routes with a status", n, scaleGateways*scaleRoutesPerGW)
		}
		return nil
	})
	t0 := addEndpoint(b, c, ns, 0, 0, "10.203.0.1")
	w.wait(b, gwName(0), "10.203.0.1", t0)
	cw.wait(b, gwName(0), "10.203.0.1", t0)

	b.ResetTimer()
	// One change at a time: each waits for its config before the next.
	cpu0 := cpuTime()
	var quiet, quietCDS []time.Duration
	for i := range scaleQuietChanges {
		g, r := i%scaleGateways, (i*7)%scaleRoutesPerGW
		ip := fmt.Sprintf("10.201.%d.%d", i/250, i%250+1)
		t0 := addEndpoint(b, c, ns, g, r, ip)
		quiet = append(quiet, w.wait(b, gwName(g), ip, t0))
		quietCDS = append(quietCDS, cw.wait(b, gwName(g), ip, t0))
	}
	quietCPU := cpuTime() - cpu0
	b.Logf("quiet changes, in order: %v", quiet)

	// A burst: every change issued back to back, across Gateways.
	renders0 := renderCount()
	cpu0 = cpuTime()
	cp0 := childrenCPUTime()
	burstStart := time.Now()
	type change struct {
		gw, ip string
		at     time.Time
	}
	var changes []change
	for i := range scaleBurstChanges {
		g, r := (i*13)%scaleGateways, (i*3)%scaleRoutesPerGW
		ip := fmt.Sprintf("10.202.%d.%d", i/250, i%250+1)
		changes = append(changes, change{gwName(g), ip, addEndpoint(b, c, ns, g, r, ip)})
	}
	issued := time.Since(burstStart)
	var burst, burstCDS []time.Duration
	for _, ch := range changes {
		burst = append(burst, w.wait(b, ch.gw, ch.ip, ch.at))
		burstCDS = append(burstCDS, cw.wait(b, ch.gw, ch.ip, ch.at))
	}
	burstCPU := cpuTime() - cpu0
	burstControlPlaneCPU := childrenCPUTime() - cp0
	drained := time.Since(burstStart)
	renders := renderCount() - renders0
	b.StopTimer()

	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
	ms2 := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms2(pct(quiet, 50)), "quiet-p50-ms")
	b.ReportMetric(ms2(pct(quiet, 99)), "quiet-p99-ms")
	b.ReportMetric(ms2(pct(burst, 50)), "burst-p50-ms")
	b.ReportMetric(ms2(pct(burst, 99)), "burst-p99-ms")
	b.ReportMetric(ms2(pct(quietCDS, 50)), "cds-quiet-p50-ms")
	b.ReportMetric(ms2(pct(quietCDS, 99)), "cds-quiet-p99-ms")
	b.ReportMetric(ms2(pct(burstCDS, 50)), "cds-burst-p50-ms")
	b.ReportMetric(ms2(pct(burstCDS, 99)), "cds-burst-p99-ms")
	b.ReportMetric(ms2(quietCPU)/scaleQuietChanges, "cpu-ms/change")
	b.ReportMetric(renders/scaleBurstChanges, "renders/change")
	b.Logf("burst: issued in %v, every config had its change %v after the first was issued; control plane (API server and etcd) CPU %v per change",
		issued.Round(time.Millisecond), drained.Round(time.Millisecond), burstControlPlaneCPU/scaleBurstChanges)
	b.Logf("quiet: %d changes, p50 %v, p99 %v, CPU %v per change; burst: %d changes, p50 %v, p99 %v, CPU %v per change, %v renders",
		scaleQuietChanges, pct(quiet, 50), pct(quiet, 99), quietCPU/scaleQuietChanges,
		scaleBurstChanges, pct(burst, 50), pct(burst, 99), burstCPU/scaleBurstChanges, renders)
	b.Logf("over CDS: quiet p50 %v, p99 %v; burst p50 %v, p99 %v", pct(quietCDS, 50), pct(quietCDS, 99), pct(burstCDS, 50), pct(burstCDS, 99))
}

const scaleYAML = `apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: scale-class}
spec:
  controllerName: stunner.l7mp.io/gateway-operator
  parametersRef: {group: stunner.l7mp.io, kind: GatewayConfig, name: scale-config, namespace: %[1]s}
---
apiVersion: stunner.l7mp.io/v1
kind: GatewayConfig
metadata: {name: scale-config, namespace: %[1]s}
spec: {dataplane: scale-dataplane, username: user, password: pass}
---
apiVersion: stunner.l7mp.io/v1
kind: Dataplane
metadata: {name: scale-dataplane}
spec: {image: ternd:test, configSource: ConfigMap}
`

func gwName(g int) string     { return fmt.Sprintf("gw-%02d", g) }
func svcName(g, r int) string { return fmt.Sprintf("sfu-%02d-%02d", g, r) }

// endpointIP is endpoint e of route r of Gateway g: unique across the benchmark.
func endpointIP(g, r, e int) string {
	n := (g*scaleRoutesPerGW+r)*scaleEndpointsPerSv + e
	return fmt.Sprintf("10.200.%d.%d", n/250, n%250+1)
}

// loadScaleObjects creates the Gateways, routes, headless Services (the API server's default
// service range has too few ClusterIPs for 1,000) and EndpointSlices, four writers at a time.
func loadScaleObjects(b *testing.B, c client.Client, ns string) {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	work := make(chan func() error)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				if err := f(); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for g := range scaleGateways {
		work <- func() error {
			return createYAML(c, fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: %s, namespace: %s}
spec:
  gatewayClassName: scale-class
  listeners: [{name: udp, port: 3478, protocol: TURN-UDP}]
`, gwName(g), ns))
		}
		for r := range scaleRoutesPerGW {
			work <- func() error {
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svcName(g, r), Namespace: ns},
					Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 7882, Protocol: corev1.ProtocolUDP}}}}
				if err := c.Create(ctx, svc); err != nil {
					return err
				}
				es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: svcName(g, r) + "-1", Namespace: ns,
					Labels: map[string]string{discoveryv1.LabelServiceName: svcName(g, r)}}, AddressType: discoveryv1.AddressTypeIPv4}
				for e := range scaleEndpointsPerSv {
					es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{endpointIP(g, r, e)}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
				}
				if err := c.Create(ctx, es); err != nil {
					return err
				}
				return createYAML(c, fmt.Sprintf(`apiVersion: stunner.l7mp.io/v1
kind: UDPRoute
metadata: {name: %s, namespace: %s}
spec:
  parentRefs: [{name: %s}]
  rules: [{backendRefs: [{name: %s}]}]
`, svcName(g, r), ns, gwName(g), svcName(g, r)))
			}
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// createYAML creates the one object of a YAML document.
func createYAML(c client.Client, doc string) error {
	var u unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		return err
	}
	return c.Create(context.Background(), &u)
}

// addEndpoint adds ip to the EndpointSlice of route r of Gateway g and returns when the update
// returned.
func addEndpoint(b *testing.B, c client.Client, ns string, g, r int, ip string) time.Time {
	var es discoveryv1.EndpointSlice
	if err := get(c, ns, svcName(g, r)+"-1", &es); err != nil {
		b.Fatal(err)
	}
	es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
	if err := c.Update(context.Background(), &es); err != nil {
		b.Fatal(err)
	}
	return time.Now()
}

// configWatch follows the rendered configs of a namespace's Gateways: for each, the time each
// endpoint address was first seen in it.
type configWatch struct {
	mu   sync.Mutex
	seen map[string]map[string]time.Time // Gateway -> address -> first seen
	cond *sync.Cond
}

func newConfigWatch() *configWatch {
	w := &configWatch{seen: map[string]map[string]time.Time{}}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// record notes the endpoint addresses in cfg, a config of Gateway gw that arrived now.
func (w *configWatch) record(gw, cfg string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.seen[gw]
	if m == nil {
		m = map[string]time.Time{}
		w.seen[gw] = m
	}
	for _, f := range strings.FieldsFunc(cfg, func(r rune) bool { return !strings.ContainsRune("0123456789.", r) }) {
		if strings.Count(f, ".") == 3 {
			if _, ok := m[f]; !ok {
				m[f] = now
			}
		}
	}
	w.cond.Broadcast()
}

// watchConfigs follows the Gateways' ConfigMaps in ns, as a ConfigMap-mode dataplane does.
func watchConfigs(b *testing.B, cs kubernetes.Interface, ns string) *configWatch {
	w := newConfigWatch()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	wi, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for ev := range wi.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
				w.record(cm.Name, cm.Data[render.ConfigKey], time.Now())
			}
		}
	}()
	return w
}

// watchCDS follows the configs of Gateways 0..scaleGateways-1 in ns as the dataplane pods of
// the default config source do: one WebSocket watch per Gateway (dataplane/cdsclient, ternd's
// own client) on tern-operator's config discovery service, served here over loopback HTTP
// from the test operator's store.
func watchCDS(b *testing.B, ns string) *configWatch {
	w := newConfigWatch()
	srv := httptest.NewServer(cds.NewHandler(op.cds, nil, slog.New(slog.DiscardHandler)))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait(); srv.Close() })
	for g := range scaleGateways {
		u, err := cdsclient.WatchURL(srv.URL, ns, gwName(g), "")
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cdsclient.Watch(ctx, u, func(cfg []byte) { w.record(gwName(g), string(cfg), time.Now()) }, nil)
		}()
	}
	return w
}

// has reports whether ip was seen in the config of Gateway gw.
func (w *configWatch) has(gw, ip string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.seen[gw][ip]
	return ok
}

// wait returns how long after since ip first showed in gw's config, waiting up to a minute.
func (w *configWatch) wait(b *testing.B, gw, ip string, since time.Time) time.Duration {
	deadline := time.Now().Add(time.Minute)
	go func() { time.Sleep(time.Minute); w.cond.Broadcast() }()
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if at, ok := w.seen[gw][ip]; ok {
			return max(at.Sub(since), 0)
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %s not in the config after a minute", gw, ip)
		}
		w.cond.Wait()
	}
}

// pct returns the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childrenCPUTime is the user and system CPU time of this process's child processes while
// they run (envtest's kube-apiserver and etcd), from /proc: getrusage counts children only
// once they have exited. Zero where /proc is missing.
func childrenCPUTime() time.Duration {
	self := strconv.Itoa(os.Getpid())
	dirs, _ := os.ReadDir("/proc")
	var ticks int64
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: fields 4, 14 and 15, counted after the
		// comm's closing parenthesis, since comm may hold spaces.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 || f[1] != self {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + st
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ, 100 on Linux
}

// renderCount is stunner_gateway_operator_render_total.
func renderCount() float64 {
	var m dto.Metric
	_ = operatorMetrics.renders.Write(&m)
	return m.GetCounter().GetValue()
}
