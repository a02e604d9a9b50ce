package k8sconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/testenv"
)

var env = testenv.New(testenv.Options{})

func TestMain(m *testing.M) {
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// propagationBound is how soon a changed ConfigMap must reach apply (the issue's "about a
// second" for a new media-server endpoint to become reachable).
const propagationBound = time.Second

const testKey = "ternd.conf"

// testConfig returns a valid config whose admin name tells the configs apart.
func testConfig(name string) string {
	return fmt.Sprintf(`version: v1
admin: {name: %s}
auth: {type: static, username: user, password: pass}
listeners:
  - {name: udp, protocol: TURN-UDP, address: 127.0.0.1, port: 3478, routes: [media]}
clusters:
  - {name: media, endpoints: ["10.0.0.0/24"]}
`, name)
}

// recorder is an apply func that records what it was given and can be told to fail.
type recorder struct {
	mu      sync.Mutex
	failOn  string // admin name whose first apply fails
	applied chan string
}

func (r *recorder) apply(c *config.Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failOn != "" && c.Admin.Name == r.failOn {
		r.failOn = ""
		return errors.New("listener port busy")
	}
	if c.Admin.Name == "placeholder" && c.Relay.Address != "127.0.0.2" {
		return fmt.Errorf("relay address %q, want $(POD_IP) expanded to 127.0.0.2", c.Relay.Address)
	}
	r.applied <- c.Admin.Name
	return nil
}

// TestWatch drives one ConfigMap through valid, invalid and unrelated changes on a real API
// server and checks which configs reach apply, and that each valid one does within
// propagationBound.
func TestWatch(t *testing.T) {
	kubeconfig := env.KubeconfigFile(t)
	cs := kubernetes.NewForConfigOrDie(env.Config(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const ns, name = "k8sconfig-watch", "udp-gateway"
	mustCreate(t, cs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	mustCreate(t, cs, configMap(ns, name, testConfig("first")))
	mustCreate(t, cs, configMap(ns, "other-gateway", testConfig("other")))

	oldRetry := retryPeriod
	retryPeriod = 300 * time.Millisecond
	defer func() { retryPeriod = oldRetry }()

	t.Setenv("POD_IP", "127.0.0.2") // what the rendered Deployment sets from status.podIP
	rec := &recorder{applied: make(chan string, 16)}
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, kubeconfig, ns, name, testKey, rec.apply, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	}()
	// The first config arrives with the informer's initial list, which includes connecting.
	expectApplied(t, rec, "first", 10*time.Second)

	steps := []struct {
		name   string
		target string // ConfigMap to change; "" is the watched one
		change func(*corev1.ConfigMap)
		want   string // admin name apply must get within propagationBound; "" means no apply
	}{
		{name: "valid update applied", change: setConfig(testConfig("second")), want: "second"},
		{name: "failed validation not applied", change: setConfig("version: v2\n"), want: ""},
		{name: "undecodable not applied", change: setConfig("{"), want: ""},
		{name: "valid after invalid applied", change: setConfig(testConfig("third")), want: "third"},
		{name: "metadata-only change not reapplied", change: annotate("touched", "yes"), want: ""},
		{name: "missing key not applied", change: func(cm *corev1.ConfigMap) { delete(cm.Data, testKey) }, want: ""},
		{name: "key back with the running config not reapplied", change: setConfig(testConfig("third")), want: ""},
		{name: "other ConfigMap ignored", target: "other-gateway", change: setConfig(testConfig("decoy")), want: ""},
		{name: "placeholder expanded from the environment", change: setConfig(testConfig("placeholder") +
			"relay: {address: $(POD_IP)}\n"), want: "placeholder"},
		{name: "binaryData accepted", change: func(cm *corev1.ConfigMap) {
			delete(cm.Data, testKey)
			cm.BinaryData = map[string][]byte{testKey: []byte(testConfig("binary"))}
		}, want: "binary"},
	}
	for _, st := range steps {
		target := st.target
		if target == "" {
			target = name
		}
		start := time.Now()
		mustUpdate(t, cs, ns, target, st.change)
		if st.want == "" {
			expectQuiet(t, rec, st.name, 500*time.Millisecond)
			continue
		}
		expectApplied(t, rec, st.want, propagationBound)
		t.Logf("%s: ConfigMap update to apply took %v", st.name, time.Since(start))
	}

	t.Run("failed apply retried", func(t *testing.T) {
		rec.mu.Lock()
		rec.failOn = "retried"
		rec.mu.Unlock()
		mustUpdate(t, cs, ns, name, func(cm *corev1.ConfigMap) {
			cm.BinaryData = nil
			cm.Data = map[string]string{testKey: testConfig("retried")}
		})
		expectApplied(t, rec, "retried", propagationBound+3*retryPeriod)
	})

	t.Run("deleted ConfigMap keeps running config", func(t *testing.T) {
		if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		expectQuiet(t, rec, "delete", 500*time.Millisecond)
		mustCreate(t, cs, configMap(ns, name, testConfig("recreated")))
		expectApplied(t, rec, "recreated", propagationBound)
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Watch returned %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Watch did not return within 5s of cancel")
	}
}

func TestWatchArgs(t *testing.T) {
	noop := func(*config.Config) error { return nil }
	tests := []struct {
		name                 string
		kubeconfig, ns, n, k string
		apply                func(*config.Config) error
	}{
		{name: "no namespace", n: "gw", k: "k", apply: noop},
		{name: "no name", ns: "ns", k: "k", apply: noop},
		{name: "no key", ns: "ns", n: "gw", apply: noop},
		{name: "nil apply", ns: "ns", n: "gw", k: "k"},
		{name: "missing kubeconfig", kubeconfig: "/nonexistent/kubeconfig", ns: "ns", n: "gw", k: "k", apply: noop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := Watch(ctx, tt.kubeconfig, tt.ns, tt.n, tt.k, tt.apply, nil); err == nil {
				t.Error("Watch returned nil, want an error")
			}
		})
	}
}

func configMap(ns, name, conf string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string]string{testKey: conf},
	}
}

func setConfig(conf string) func(*corev1.ConfigMap) {
	return func(cm *corev1.ConfigMap) {
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[testKey] = conf
	}
}

func annotate(k, v string) func(*corev1.ConfigMap) {
	return func(cm *corev1.ConfigMap) { metav1.SetMetaDataAnnotation(&cm.ObjectMeta, k, v) }
}

func mustCreate(t *testing.T, cs kubernetes.Interface, obj any) {
	t.Helper()
	var err error
	ctx := context.Background()
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
	case *corev1.ConfigMap:
		_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		t.Fatalf("mustCreate: unsupported %T", obj)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func mustUpdate(t *testing.T, cs kubernetes.Interface, ns, name string, change func(*corev1.ConfigMap)) {
	t.Helper()
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(cm)
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func expectApplied(t *testing.T, rec *recorder, want string, within time.Duration) {
	t.Helper()
	select {
	case got := <-rec.applied:
		if got != want {
			t.Fatalf("apply got config %q, want %q", got, want)
		}
	case <-time.After(within):
		t.Fatalf("config %q not applied within %v", want, within)
	}
}

func expectQuiet(t *testing.T, rec *recorder, step string, d time.Duration) {
	t.Helper()
	select {
	case got := <-rec.applied:
		t.Fatalf("%s: apply got config %q, want no apply", step, got)
	case <-time.After(d):
	}
}

// testWriter sends Watch's log to the test log, so a failure shows what Watch saw.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
