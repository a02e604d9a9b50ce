package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is one API server shared by the tests of a package: it starts on the first Config call
// and stops in TestMain, because starting kube-apiserver and etcd costs seconds per test.
//
//	var env = testenv.New(testenv.Options{CRDPaths: ...})
//	func TestMain(m *testing.M) { code := m.Run(); env.Stop(); os.Exit(code) }
type Env struct {
	opts Options

	once  sync.Once
	env   *envtest.Environment
	cfg   *rest.Config
	err   error
	kcfg  string
	kOnce sync.Once
	kErr  error
}

// Options configure an Env.
type Options struct {
	// CRDPaths are CRD files or directories of CRD files to install before tests run.
	CRDPaths []string
}

// New returns an Env that has not started yet.
func New(opts Options) *Env { return &Env{opts: opts} }

// Config starts the API server on first use and returns a client config for it (each caller
// gets its own copy). It skips or fails tb as Assets does, and fails tb if the API server did
// not start.
func (e *Env) Config(tb testing.TB) *rest.Config {
	tb.Helper()
	Assets(tb)
	e.once.Do(e.start)
	if e.err != nil {
		tb.Fatalf("envtest: %v", e.err)
	}
	return rest.CopyConfig(e.cfg)
}

// KubeconfigFile returns the path of a kubeconfig file for the API server, for code that takes
// a kubeconfig path rather than a *rest.Config. It starts the server like Config.
func (e *Env) KubeconfigFile(tb testing.TB) string {
	tb.Helper()
	e.Config(tb)
	e.kOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tern-envtest-kubeconfig-")
		if err != nil {
			e.kErr = err
			return
		}
		e.kcfg = filepath.Join(dir, "kubeconfig")
		e.kErr = os.WriteFile(e.kcfg, e.env.KubeConfig, 0o600)
	})
	if e.kErr != nil {
		tb.Fatalf("envtest kubeconfig: %v", e.kErr)
	}
	return e.kcfg
}

// start runs envtest with the API server flags that let kube-apiserver 1.37 start where the
// only interface is loopback: the default endpoint reconciler refuses a loopback advertise
// address, and envtest needs no kubernetes Service endpoints anyway.
func (e *Env) start() {
	env := &envtest.Environment{
		CRDDirectoryPaths:        e.opts.CRDPaths,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute, // a shared 2-core machine starts it slowly
		ControlPlaneStopTimeout:  time.Minute,
	}
	api := env.ControlPlane.GetAPIServer()
	api.Configure().
		Set("advertise-address", "127.0.0.1").
		Set("endpoint-reconciler-type", "none")
	cfg, err := env.Start()
	if err != nil {
		e.err = fmt.Errorf("start kube-apiserver and etcd from %s: %w", os.Getenv(assetsEnv), err)
		return
	}
	e.env, e.cfg = env, cfg
}

// Stop stops the API server and etcd if they were started. Call it from TestMain after m.Run.
func (e *Env) Stop() {
	if e.env != nil {
		if err := e.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "envtest: stop: %v\n", err)
		}
	}
	if e.kcfg != "" {
		os.RemoveAll(filepath.Dir(e.kcfg))
	}
}
