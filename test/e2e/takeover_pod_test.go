package e2e

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tern-gw/tern/internal/testenv"
)

// The flags a rendered DaemonSet pod hands over with (docs/operations.md,
// "Kubernetes: DaemonSet"): --takeover-or-start and --after-handover wait.

// launchTerndArgs starts ternd with the default config changed by mutate
// and args after "-c <file>", without waiting for it.
func launchTerndArgs(t *testing.T, mutate func(*config), args ...string) *server {
	t.Helper()
	cfg := defaultConfig(t)
	if mutate != nil {
		mutate(&cfg)
	}
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ternd.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	l := cfg.Listeners[0]
	s := &server{cfg: cfg, addr: &net.UDPAddr{IP: net.ParseIP(l.Address), Port: l.Port}, cfgPath: path,
		healthURL: "http://" + cfg.Admin.HealthAddress, metricsURL: "http://" + cfg.Admin.MetricsAddress}
	s.start(t, exec.Command(terndBinary(t), append([]string{"-c", path, "-l", cfg.Admin.LogLevel}, args...)...))
	return s
}

// podArgs are the hand-over flags of a rendered DaemonSet pod.
var podArgs = []string{"--takeover-or-start", "--after-handover", "wait"}

// TestTakeoverOrStart: with --takeover-or-start, ternd starts afresh when
// the hand-over socket's file is missing or nothing listens on it (a
// socket file left behind), and exits 1 without serving when something
// answers on it but the hand-over fails.
func TestTakeoverOrStart(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's hand-over")
	}
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, path string) // makes what is at path
		starts bool
	}{
		{name: "no socket file", before: func(*testing.T, string) {}, starts: true},
		{name: "socket file left behind", starts: true, before: func(t *testing.T, path string) {
			l := listenUnixPacket(t, path)
			l.SetUnlinkOnClose(false)
			l.Close()
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("the socket file is gone: %v", err)
			}
		}},
		{name: "a listener that hangs up", starts: false, before: func(t *testing.T, path string) {
			l := listenUnixPacket(t, path)
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "run", "ternd.sock")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			tc.before(t, path)
			s := launchTerndArgs(t, func(c *config) { c.Admin.HandoverSocket = path }, podArgs...)
			if !tc.starts {
				s.signalled = true
				exited, err := s.waitExit(90 * time.Second)
				var ee *exec.ExitError
				if !exited || !errors.As(err, &ee) || ee.ExitCode() != 1 {
					t.Fatalf("ternd with a failing predecessor: exited %v, %v; want exit status 1\n%s", exited, err, s.out.String())
				}
				if !strings.Contains(s.out.String(), "takeover failed") {
					t.Errorf("ternd's log does not say the takeover failed:\n%s", s.out.String())
				}
				if err := stunBinding(s.addr, 200*time.Millisecond); err == nil {
					t.Errorf("something answers on %v: the ternd that failed to take over must not serve", s.addr)
				}
				return
			}
			if err := waitServerReady(s); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(s.out.String(), "no ternd to take over from; starting") {
				t.Errorf("ternd's log does not say it started afresh:\n%s", s.out.String())
			}
			echo := startEchoPeer(t, "127.0.0.1:0")
			startFlows(t, s, echo, 2)
			fi, err := os.Stat(path)
			if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
				t.Errorf("hand-over socket %s: %v, %v; want a socket, mode 0600", path, fi.Mode(), err)
			}
		})
	}
}

func listenUnixPacket(t *testing.T, path string) *net.UnixListener {
	t.Helper()
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestTakeoverWaitAfterHandover: two ternds as two pods of a DaemonSet on
// one node would run them. The first starts afresh, the second takes its
// allocations over; the first (--after-handover wait) then stays up
// without serving until SIGTERM and exits 0 on it, and the successor's
// allocations are untouched: each refreshes, binds and relays on it.
func TestTakeoverWaitAfterHandover(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's hand-over")
	}
	withSocket := takeoverConfig(t)
	old := launchTerndArgs(t, withSocket, podArgs...)
	if err := waitServerReady(old); err != nil {
		t.Fatal(err)
	}
	echo := startEchoPeer(t, "127.0.0.1:0")
	const n = 10
	flows := startFlows(t, old, echo, n)
	old.waitMetric(t, "stunner_allocations_active", n, 10*time.Second)

	// The successor's config differs in its health and metrics addresses
	// only, so that the old process's endpoints can be told from its.
	cfg := old.cfg
	healthPort, closeHealth := freePort(t, "tcp4")
	metricsPort, closeMetrics := freePort(t, "tcp4")
	closeHealth()
	closeMetrics()
	cfg.Admin.HealthAddress = "127.0.0.1:" + strconv.Itoa(healthPort)
	cfg.Admin.MetricsAddress = "127.0.0.1:" + strconv.Itoa(metricsPort)
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ternd.yaml")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	next := &server{cfg: cfg, addr: old.addr, healthURL: "http://" + cfg.Admin.HealthAddress, metricsURL: "http://" + cfg.Admin.MetricsAddress, cfgPath: path}
	next.start(t, exec.Command(terndBinary(t), append([]string{"-c", path, "-l", cfg.Admin.LogLevel}, podArgs...)...))
	testenv.Eventually(t, 60*time.Second, func() error {
		if !strings.Contains(old.out.String(), "waiting for SIGTERM") {
			return errors.New("the old ternd has not said it waits")
		}
		return nil
	})
	testenv.Eventually(t, readyTimeout, func() error {
		if next.exited() {
			t.Fatalf("new ternd exited: %v", next.waitErr)
		}
		return next.ready()
	})
	if !strings.Contains(next.out.String(), "took over") {
		t.Errorf("the new ternd did not take over:\n%s", next.out.String())
	}
	time.Sleep(2 * time.Second) // the old process must stay up: not a timed assertion on speed
	if old.exited() {
		t.Fatalf("the old ternd exited after the hand-over with --after-handover wait: %v\n%s", old.waitErr, old.out.String())
	}
	// The old process serves no health endpoint: it is not ready, and on
	// a node's network its port is free for the successor's.
	if err := old.ready(); err == nil {
		t.Errorf("the old ternd answers /ready with 200 after the hand-over")
	}
	checkAfterTakeover(t, flows)

	old.signal(t, syscall.SIGTERM)
	if exited, err := old.waitExit(30 * time.Second); !exited || err != nil {
		t.Fatalf("old ternd after SIGTERM: exited %v, %v\n%s", exited, err, old.out.String())
	}
	next.waitMetric(t, "stunner_allocations_active", n, 10*time.Second)
	checkAfterTakeover(t, flows)
	if err := next.ready(); err != nil {
		t.Errorf("the new ternd after the old one exited: %v", err)
	}
}

// TestTakeoverWhileDraining: a pod deleted before its successor took
// over (the successor's first readiness probe reached the old pod's
// endpoint on the node's network) gets SIGTERM and drains; it still hands
// over when the successor asks, and then exits 0 without waiting for
// another signal. Every allocation refreshes and relays on the successor.
func TestTakeoverWhileDraining(t *testing.T) {
	if targetIsCoturn() {
		t.Skip("ternd's hand-over")
	}
	old := launchTerndArgs(t, takeoverConfig(t), podArgs...)
	if err := waitServerReady(old); err != nil {
		t.Fatal(err)
	}
	echo := startEchoPeer(t, "127.0.0.1:0")
	flows := startFlows(t, old, echo, 3)
	old.signal(t, syscall.SIGTERM)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(old.out.String(), "SIGTERM: draining") {
			return errors.New("the old ternd has not started draining")
		}
		return nil
	})
	next := &server{cfg: old.cfg, addr: old.addr, healthURL: old.healthURL, metricsURL: old.metricsURL, cfgPath: old.cfgPath}
	next.start(t, exec.Command(terndBinary(t), append([]string{"-c", old.cfgPath, "-l", old.cfg.Admin.LogLevel}, podArgs...)...))
	if exited, err := old.waitExit(60 * time.Second); !exited || err != nil {
		t.Fatalf("the draining ternd after the hand-over: exited %v, %v\n%s", exited, err, old.out.String())
	}
	if !strings.Contains(old.out.String(), "handed over to the successor while draining") {
		t.Errorf("the old ternd's log does not say it handed over while draining:\n%s", old.out.String())
	}
	testenv.Eventually(t, readyTimeout, func() error {
		if next.exited() {
			t.Fatalf("new ternd exited: %v", next.waitErr)
		}
		return next.ready()
	})
	next.waitMetric(t, "stunner_allocations_active", 3, 10*time.Second)
	checkAfterTakeover(t, flows)
}
