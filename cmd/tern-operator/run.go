package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tern-gw/tern/dataplane/config/loglevel"
	"github.com/tern-gw/tern/internal/kubeclient"
	"github.com/tern-gw/tern/operator/authservice"
	"github.com/tern-gw/tern/operator/cds"
	"github.com/tern-gw/tern/operator/controller"
	"github.com/tern-gw/tern/operator/render"
)

const runUsage = `usage: tern-operator [run] [flags]

Runs the controller: watches Gateway API and stunner.l7mp.io/v1 resources in
the cluster of --kubeconfig (default $KUBECONFIG, ~/.kube/config, then the
in-cluster service account) and renders, per Gateway of a managed
GatewayClass, its dataplane ConfigMap, Deployment and Service, and writes
status. Only the elected leader among replicas reconciles. Every replica
serves STUNner's auth service API (GET /ice and GET /: TURN URIs and
credentials for WebRTC clients) on --auth-addr; the leader serves STUNner's
config discovery service (GET /api/v1/configs) on --config-discovery-address.
SIGTERM or SIGINT stops it.
Flags:
`

// defaultHealthAddr serves /healthz and /readyz; deploy/operator probes it.
const defaultHealthAddr = ":8081"

// defaultAuthAddr serves the auth service on STUNner's port, which its clients expect.
const defaultAuthAddr = ":8088"

// The auth service's default rate limit per client address. Its callers are application
// servers, each asking once per session setup: 20 a second sustained, in bursts of 40, serves
// an application server setting up 1.7 million sessions a day, while one address can mint no
// faster than that (docs/security.md).
const (
	defaultAuthRate  = 20
	defaultAuthBurst = 40
)

// serviceAccountNamespaceFile holds the pod's namespace when running in a cluster.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// runOperator runs the controller until SIGTERM or SIGINT and returns the exit code.
func runOperator(args []string, stderr io.Writer) int {
	return operate(ctrl.SetupSignalHandler(), args, stderr)
}

// operate parses the run flags and runs the manager until ctx ends. It returns 0 after a
// clean stop, 1 when the controller could not start or failed, 2 for bad usage.
func operate(ctx context.Context, args []string, stderr io.Writer) int {
	f, log, code := parseRun(args, stderr)
	if code >= 0 {
		return code
	}
	if err := runManager(ctx, f, log); err != nil {
		log.Error("tern-operator failed", "err", err)
		return 1
	}
	return 0
}

// parseRun parses the run flags and sets up logging. It returns the exit code to leave with
// (2 for bad usage, 0 after -h), or -1 and what runManager needs.
func parseRun(args []string, stderr io.Writer) (managerFlags, *slog.Logger, int) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, runUsage); fs.PrintDefaults() }
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config, in-cluster)")
	defaultControllerName := render.DefaultControllerName
	if v := os.Getenv(envControllerName); v != "" {
		defaultControllerName = v
	}
	controllerName := fs.String("controller-name", defaultControllerName, "controllerName of the GatewayClasses to manage (default $"+envControllerName+" or STUNner's)")
	leaderElect := fs.Bool("leader-elect", true, "elect a leader among operator replicas; only the leader reconciles")
	leaderNS := fs.String("leader-election-namespace", "", "namespace of the leader election Lease (default $POD_NAMESPACE, the pod's namespace, or default)")
	leaderID := fs.String("leader-election-id", "tern-operator.stunner.l7mp.io", "name of the leader election Lease")
	metricsAddr := fs.String("metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint; 0 disables it")
	healthAddr := fs.String("health-probe-bind-address", defaultHealthAddr, "address of the /healthz and /readyz endpoints; 0 disables them")
	authAddr := fs.String("auth-addr", defaultAuthAddr, "address of the auth service (GET /ice, GET /: TURN credentials); empty or 0 disables it")
	authPublicAddr := fs.String("auth-public-addr", os.Getenv("STUNNER_PUBLIC_ADDR"),
		"host the auth service puts into every TURN URI instead of the Gateways' addresses (default $STUNNER_PUBLIC_ADDR)")
	authRate := fs.Float64("auth-rate-limit", defaultAuthRate,
		"requests per second each client address may make to the auth service (token bucket; past it 429 with Retry-After); 0 disables the limit")
	authBurst := fs.Int("auth-rate-burst", defaultAuthBurst, "requests each client address may make to the auth service at once")
	authTokenFile := fs.String("auth-token-file", "",
		"file holding a bearer token every auth service request must carry (Authorization: Bearer <token>); read per request; empty: none")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	stunner := addStunnerFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return managerFlags{}, nil, 0
		}
		return managerFlags{}, nil, 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return managerFlags{}, nil, 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := stunner.resolve(set); err != nil {
		fmt.Fprintf(stderr, "tern-operator: %v\n", err)
		return managerFlags{}, nil, 2
	}
	if stunner.zapLogLevel != "" && !set["log-level"] {
		*logLevel, _ = stunner.level() // resolve checked it
	}
	level, err := loglevel.Parse(*logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "tern-operator: --log-level: %v\n", err)
		return managerFlags{}, nil, 2
	}
	if err := authservice.CheckPublicAddr(*authPublicAddr); err != nil {
		fmt.Fprintf(stderr, "tern-operator: --auth-public-addr: %v\n", err)
		return managerFlags{}, nil, 2
	}
	if *authRate < 0 || math.IsNaN(*authRate) || math.IsInf(*authRate, 0) {
		fmt.Fprintf(stderr, "tern-operator: --auth-rate-limit: want 0 or more requests per second, got %v\n", *authRate)
		return managerFlags{}, nil, 2
	}
	if *authBurst < 1 {
		fmt.Fprintf(stderr, "tern-operator: --auth-rate-burst: want 1 or more, got %d\n", *authBurst)
		return managerFlags{}, nil, 2
	}
	if *authAddr == "0" {
		*authAddr = ""
	}
	if stunner.cdsAddr == "0" {
		stunner.cdsAddr = ""
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	// controller-runtime and client-go log through logr and klog: send both to the same handler.
	logger := logr.FromSlogHandler(log.Handler())
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	stunner.logIgnored(log, set)

	return managerFlags{
		kubeconfig:     *kubeconfig,
		controllerName: *controllerName,
		leaderElect:    *leaderElect,
		leaderNS:       leaderNamespace(*leaderNS),
		leaderID:       *leaderID,
		metricsAddr:    *metricsAddr,
		healthAddr:     *healthAddr,
		authAddr:       *authAddr,
		authPublicAddr: *authPublicAddr,
		authRate:       *authRate,
		authBurst:      *authBurst,
		authTokenFile:  *authTokenFile,
		pprofAddr:      stunner.pprofAddr,
		throttle:       stunner.throttle,
		labelFilter:    stunner.labelFilter,
		cdsAddr:        stunner.cdsAddr,
	}, log, -1
}

// managerFlags are the parsed run flags runManager needs.
type managerFlags struct {
	kubeconfig, controllerName string
	leaderElect                bool
	leaderNS, leaderID         string
	metricsAddr, healthAddr    string
	authAddr, authPublicAddr   string
	authRate                   float64 // requests/s per client address; 0: no limit
	authBurst                  int
	authTokenFile              string
	pprofAddr                  string
	throttle                   time.Duration
	labelFilter                []string // nil: render's default
	cdsAddr                    string   // config discovery service; "": off
}

// The operator's client-side rate limit on API requests. client-go's default, 5 requests/s in
// bursts of 10, made the operator's writes the bottleneck of config propagation: a reconcile
// writes the ConfigMap and statuses, so back-to-back EndpointSlice changes reached ternd at
// one every 200 ms (measured in test/cluster). kube-controller-manager's defaults are 20 and
// 30; the API server's priority and fairness still protects it.
const (
	apiQPS   = 50
	apiBurst = 100
)

// runManager builds the manager with the controller, health checks and metrics, and runs it
// until ctx ends.
func runManager(ctx context.Context, f managerFlags, log *slog.Logger) error {
	cfg, err := kubeclient.RESTConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "tern-operator"
	cfg.QPS, cfg.Burst = apiQPS, apiBurst
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                  controller.NewScheme(),
		Cache:                   controller.CacheOptions(),
		Metrics:                 metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress:  f.healthAddr,
		PprofBindAddress:        f.pprofAddr,
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        f.leaderID,
		LeaderElectionNamespace: f.leaderNS,
		// A leader that is stopping gives up the Lease at once, so a rolling update hands over
		// in seconds instead of waiting for the Lease to expire.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       ptr(30 * time.Second),
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	copts := controller.Options{ControllerName: f.controllerName, ThrottleTimeout: f.throttle, LabelFilter: f.labelFilter}
	if f.cdsAddr != "" {
		store := cds.NewStore()
		clog := log.With("component", "config-discovery")
		// Clients other than port-forwards get only the configs of the Gateways they are a
		// running dataplane pod of, told by the pod cache's index of pod IPs.
		pods, err := controller.IndexDataplanePods(ctx, mgr)
		if err != nil {
			return err
		}
		if err := cds.RegisterMetrics(ctrlmetrics.Registry); err != nil {
			return fmt.Errorf("config discovery metrics: %w", err)
		}
		// Bound when this replica is elected: only the leader renders, so only it serves.
		if err := mgr.Add(cds.NewServer(f.cdsAddr, cds.NewHandler(store, pods, clog), clog)); err != nil {
			return err
		}
		copts.Configs = store
		copts.ConfigDiscoveryNamespace, copts.ConfigDiscoveryPort = configDiscoveryService(f.cdsAddr)
	} else {
		copts.NoConfigDiscovery = true
	}
	if _, err := controller.Setup(mgr, copts); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if f.authAddr != "" {
		alog := log.With("component", "auth-service")
		h := authservice.New(mgr.GetClient(), authservice.Options{
			ControllerName: f.controllerName, PublicAddr: f.authPublicAddr, Log: alog,
			RateLimit: f.authRate, RateBurst: f.authBurst, TokenFile: f.authTokenFile})
		srv, err := authservice.Listen(f.authAddr, h, alog)
		if err != nil {
			return fmt.Errorf("auth service: %w", err)
		}
		if err := mgr.Add(srv); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// Ready once the informer caches have synced, so a rolling update waits for a replica that
	// can actually render.
	if err := mgr.AddReadyzCheck("caches", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("caches not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	log.Info("starting tern-operator", "controllerName", f.controllerName, "leaderElection", f.leaderElect,
		"leaderElectionNamespace", f.leaderNS, "metrics", f.metricsAddr, "health", f.healthAddr, "auth", f.authAddr,
		"pprof", f.pprofAddr, "configDiscovery", f.cdsAddr, "throttleTimeout", f.throttle.String())
	return mgr.Start(ctx)
}

// configDiscoveryService says where CDS pods find the config discovery service served on
// addr: the namespace of the Service stunner-config-discovery, the operator's
// ($POD_NAMESPACE; "" for render's default, tern-system), and the port of addr (0 for
// render's default, 13478, when addr names none). Render names the Service by its ClusterIP,
// or by this namespace and port while it has none.
func configDiscoveryService(addr string) (namespace string, port int) {
	if _, p, err := net.SplitHostPort(addr); err == nil {
		if n, err := strconv.Atoi(p); err == nil && n > 0 && n <= 65535 {
			port = n
		}
	}
	return os.Getenv("POD_NAMESPACE"), port
}

// leaderNamespace returns flag if set, else $POD_NAMESPACE, else "" in a pod (controller-runtime
// then reads the pod's namespace itself), else "default" so a local run works out of the box.
func leaderNamespace(flag string) string {
	if flag != "" {
		return flag
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if _, err := os.Stat(serviceAccountNamespaceFile); err == nil {
		return ""
	}
	return "default"
}

func ptr[T any](v T) *T { return &v }
