package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tern-gw/tern/internal/testenv"
	"github.com/tern-gw/tern/operator/cds"
)

// The API server gets the CRDs the operator is deployed with (deploy/crds).
var env = testenv.New(testenv.Options{CRDPaths: testenv.MustDeployCRDPaths()})

func TestMain(m *testing.M) {
	code := m.Run()
	op.stop()
	env.Stop()
	os.Exit(code)
}

// operator is the controller under test, running in a manager against envtest, shared by all
// tests of the package (each test uses its own namespaces and GatewayClasses).
type operator struct {
	once   sync.Once
	cancel context.CancelFunc
	done   chan error
	rec    *Reconciler
	pods   *DataplanePods // the index of dataplane pods by IP, as tern-operator's CDS uses it
	// cds holds every rendered Gateway's config as tern-operator's config discovery service
	// serves it (the reconciler publishes to it as tern-operator's does).
	cds    *cds.Store
	client client.Client // uncached, so tests see the API server's state, not a cache's
	err    error
}

var op operator

// testCDSNamespace is the test operator's namespace, where its Service
// stunner-config-discovery would be: one that only TestConfigDiscoveryOriginFollowsService
// creates, so that the other tests' CDS pods name the service by its DNS name.
const testCDSNamespace = "cds-operator"

// offloadReportPort is where the shared operator reads the pods' offload
// reports: a port free on 127.0.0.1 when it started, which the tests serve
// on other loopback addresses, the pods' (offload_test.go).
var offloadReportPort int

// freePort returns a TCP port free on 127.0.0.1 now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start returns a direct client to the API server the operator runs against, starting both
// on first use.
func (o *operator) start(t testing.TB) client.Client {
	t.Helper()
	cfg := env.Config(t)
	o.once.Do(func() { o.err = o.run(cfg) })
	if o.err != nil {
		t.Fatalf("start operator: %v", o.err)
	}
	return o.client
}

func (o *operator) run(cfg *rest.Config) error {
	if testing.Verbose() {
		ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	scheme := NewScheme()
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 scheme,
		Cache:                  CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	if offloadReportPort, err = freePort(); err != nil {
		return err
	}
	o.cds = cds.NewStore()
	if o.rec, err = Setup(mgr, Options{ConfigDiscoveryNamespace: testCDSNamespace, OffloadReportPort: offloadReportPort, Configs: o.cds}); err != nil {
		return err
	}
	if o.pods, err = IndexDataplanePods(context.Background(), mgr); err != nil {
		return err
	}
	if o.client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	o.cancel, o.done = cancel, make(chan error, 1)
	go func() { o.done <- mgr.Start(ctx) }()
	return nil
}

func (o *operator) stop() {
	if o.cancel == nil {
		return
	}
	o.cancel()
	select {
	case err := <-o.done:
		if err != nil {
			fmt.Fprintf(os.Stderr, "operator: %v\n", err)
		}
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "operator: manager did not stop within 30s")
	}
}

// applyFile creates or updates every object of the multi-document YAML file, as
// `kubectl apply --server-side` would. Annotation and label values the YAML gives as bare
// booleans or numbers (the seeds write `enable-mixed-protocol-lb: true`) are turned into
// strings, as Tern's docs tell users to quote them; the API server rejects them otherwise.
func applyFile(t *testing.T, c client.Client, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return applyYAML(t, c, data)
}

func applyYAML(t *testing.T, c client.Client, data []byte) []*unstructured.Unstructured {
	t.Helper()
	return testenv.Apply(t, c, data)
}

// waitTimeout bounds how long the operator may take to react in tests. The bound for
// config delivery is about a second; status and objects are checked against a looser one
// because envtest on a loaded 2-core machine can be slow to start watches.
const waitTimeout = 20 * time.Second

// get fetches obj by namespace/name into obj.
func get(c client.Client, ns, name string, obj client.Object) error {
	return c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

// condition checks that conds holds a condition typ with status, and, when msg is not empty,
// a message containing msg.
func condition(conds []metav1.Condition, typ string, status metav1.ConditionStatus, msg string) error {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return fmt.Errorf("no condition %s in %v", typ, conds)
	}
	if c.Status != status || !strings.Contains(c.Message, msg) {
		return fmt.Errorf("condition %s is %s (%s: %q), want %s with message containing %q", typ, c.Status, c.Reason, c.Message, status, msg)
	}
	if c.LastTransitionTime.IsZero() {
		return fmt.Errorf("condition %s has no lastTransitionTime", typ)
	}
	return nil
}
