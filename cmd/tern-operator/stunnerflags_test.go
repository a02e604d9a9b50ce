package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestStunnerOperatorFlags passes every flag of STUNner's gateway operator (its main.go and
// the controller-runtime zap flags it binds), in both of Go's spellings, and STUNner's
// environment variables: each is accepted, does what STUNner's does where Tern can, or is
// logged once as ignored.
func TestStunnerOperatorFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, f managerFlags, log *slog.Logger, out string)
	}{
		{name: "controller-name", args: []string{"--controller-name", "example.com/gw"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.controllerName != "example.com/gw" {
					t.Errorf("controller name %q", f.controllerName)
				}
			}},
		{name: "controller name from the environment", env: map[string]string{envControllerName: "example.com/env"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.controllerName != "example.com/env" {
					t.Errorf("controller name %q", f.controllerName)
				}
			}},
		{name: "throttle-timeout", args: []string{"-throttle-timeout=250ms"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.throttle != 250*time.Millisecond {
					t.Errorf("throttle %v, want 250ms", f.throttle)
				}
			}},
		{name: "throttle-timeout default renders at once",
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.throttle != 0 {
					t.Errorf("throttle %v, want 0", f.throttle)
				}
			}},
		{name: "endpoint-discovery", args: []string{"--endpoint-discovery=false"}, check: logged("--endpoint-discovery=false")},
		{name: "endpoint-discovery true is STUNner's default", args: []string{"--endpoint-discovery"}, check: notLogged("endpoint-discovery")},
		{name: "dataplane-mode managed", args: []string{"--dataplane-mode", "managed"}, check: notLogged("dataplane-mode")},
		{name: "dataplane-mode legacy", args: []string{"--dataplane-mode=legacy"}, check: logged("--dataplane-mode=legacy")},
		{name: "dataplane mode from the environment", env: map[string]string{envDataplaneMode: "legacy"},
			check: logged("$" + envDataplaneMode + "=legacy")},
		{name: "config-discovery-address", args: []string{"--config-discovery-address", "127.0.0.1:13479"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, logs string) {
				if f.cdsAddr != "127.0.0.1:13479" || strings.Contains(logs, "config-discovery-address") {
					t.Errorf("cds address %q, logs %s", f.cdsAddr, logs)
				}
			}},
		{name: "config-discovery-address default", check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
			if f.cdsAddr != ":13478" {
				t.Errorf("cds address %q, want :13478", f.cdsAddr)
			}
		}},
		{name: "metrics and health addresses", args: []string{"--metrics-bind-address=:9090", "-health-probe-bind-address", ":9091"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.metricsAddr != ":9090" || f.healthAddr != ":9091" {
					t.Errorf("metrics %q health %q", f.metricsAddr, f.healthAddr)
				}
			}},
		{name: "pprof-bind-address", args: []string{"--pprof-bind-address", "127.0.0.1:6060"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.pprofAddr != "127.0.0.1:6060" {
					t.Errorf("pprof %q", f.pprofAddr)
				}
			}},
		{name: "pprof address from the environment", env: map[string]string{envPprofAddr: "127.0.0.1:6061"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.pprofAddr != "127.0.0.1:6061" {
					t.Errorf("pprof %q", f.pprofAddr)
				}
			}},
		{name: "pprof off by default",
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.pprofAddr != "0" {
					t.Errorf("pprof %q, want 0", f.pprofAddr)
				}
			}},
		{name: "disable-endpontslice-controller", args: []string{"--disable-endpontslice-controller"}, check: logged("--disable-endpontslice-controller")},
		{name: "leader-elect", args: []string{"--leader-elect=false"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.leaderElect {
					t.Error("leader election on")
				}
			}},
		{name: "enable-finalizer", args: []string{"--enable-finalizer"}, check: logged("--enable-finalizer")},
		{name: "kubeconfig", args: []string{"--kubeconfig", "/tmp/kc"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.kubeconfig != "/tmp/kc" {
					t.Errorf("kubeconfig %q", f.kubeconfig)
				}
			}},
		{name: "zap-log-level debug", args: []string{"--zap-log-level=debug"}, check: level(slog.LevelDebug)},
		{name: "zap-log-level verbosity", args: []string{"--zap-log-level", "3"}, check: level(slog.LevelDebug)},
		{name: "zap-log-level error", args: []string{"--zap-log-level", "error"}, check: level(slog.LevelError)},
		{name: "log-level wins over zap-log-level", args: []string{"--zap-log-level", "debug", "--log-level", "warn"}, check: level(slog.LevelWarn)},
		{name: "zap-devel", args: []string{"--zap-devel=false"}, check: logged("--zap-devel")},
		{name: "zap-encoder", args: []string{"--zap-encoder", "console"}, check: logged("--zap-encoder")},
		{name: "zap-stacktrace-level", args: []string{"--zap-stacktrace-level=panic"}, check: logged("--zap-stacktrace-level")},
		{name: "zap-time-encoding", args: []string{"--zap-time-encoding", "rfc3339nano"}, check: logged("--zap-time-encoding")},
		{name: "label filter from the environment", env: map[string]string{envLabelFilter: " team , example.com/x ,"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if !slices.Equal(f.labelFilter, []string{"team", "example.com/x"}) {
					t.Errorf("label filter %q", f.labelFilter)
				}
			}},
		{name: "label filter set empty copies every label", env: map[string]string{envLabelFilter: ""},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.labelFilter == nil || len(f.labelFilter) != 0 {
					t.Errorf("label filter %q, want empty and not nil", f.labelFilter)
				}
			}},
		{name: "label filter default",
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, _ string) {
				if f.labelFilter != nil {
					t.Errorf("label filter %q, want nil (render's default)", f.labelFilter)
				}
			}},
		{name: "STUNner's Helm chart's command line", args: []string{"--leader-elect", "--metrics-bind-address=:8080",
			"--health-probe-bind-address=:8081", "--zap-log-level=info", "--dataplane-mode=managed", "--throttle-timeout=250ms",
			"--endpoint-discovery=true", "--enable-finalizer=false"},
			check: func(t *testing.T, f managerFlags, _ *slog.Logger, out string) {
				if !f.leaderElect || f.throttle != 250*time.Millisecond || strings.Contains(out, "ignoring") {
					t.Errorf("leader election %v, throttle %v, log %s", f.leaderElect, f.throttle, out)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{envControllerName, envDataplaneMode, envPprofAddr, envLabelFilter} {
				v, ok := tt.env[k]
				if !ok {
					t.Setenv(k, "") // t.Setenv restores it; unset for the test below
					unsetenv(t, k)
					continue
				}
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			f, log, code := parseRun(tt.args, &stderr)
			if code != -1 {
				t.Fatalf("exit code %d, want to run; stderr:\n%s", code, stderr.String())
			}
			tt.check(t, f, log, stderr.String())
		})
	}
}

// TestStunnerOperatorFlagsRefused: values STUNner's flags cannot take give a usage error that
// names the flag.
func TestStunnerOperatorFlagsRefused(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  string // envDataplaneMode
		want string
	}{
		{"throttle-timeout not a duration", []string{"--throttle-timeout", "soon"}, "", "--throttle-timeout"},
		{"throttle-timeout negative", []string{"--throttle-timeout=-1s"}, "", "--throttle-timeout"},
		{"dataplane-mode unknown", []string{"--dataplane-mode", "hybrid"}, "", "--dataplane-mode"},
		{"dataplane mode unknown in the environment", nil, "hybrid", "$" + envDataplaneMode},
		{"zap-log-level unknown", []string{"--zap-log-level", "loud"}, "", "--zap-log-level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envDataplaneMode, tt.env)
			if tt.env == "" {
				unsetenv(t, envDataplaneMode)
			}
			var stderr bytes.Buffer
			if code := operate(context.Background(), tt.args, &stderr); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q does not name %q", stderr.String(), tt.want)
			}
		})
	}
}

// logged checks that the run logged that it ignores flag.
func logged(flag string) func(*testing.T, managerFlags, *slog.Logger, string) {
	return func(t *testing.T, _ managerFlags, _ *slog.Logger, out string) {
		t.Helper()
		if !strings.Contains(out, "ignoring STUNner operator flag "+flag+":") {
			t.Errorf("no log line saying %s is ignored:\n%s", flag, out)
		}
	}
}

// notLogged checks that nothing about flag was logged as ignored.
func notLogged(flag string) func(*testing.T, managerFlags, *slog.Logger, string) {
	return func(t *testing.T, _ managerFlags, _ *slog.Logger, out string) {
		t.Helper()
		if strings.Contains(out, flag) {
			t.Errorf("logged about %s:\n%s", flag, out)
		}
	}
}

// level checks that the logger logs at l and not below.
func level(l slog.Level) func(*testing.T, managerFlags, *slog.Logger, string) {
	return func(t *testing.T, _ managerFlags, log *slog.Logger, _ string) {
		t.Helper()
		if !log.Enabled(context.Background(), l) || log.Enabled(context.Background(), l-1) {
			t.Errorf("logger not at level %v", l)
		}
	}
}

// unsetenv unsets k for the rest of the test; call t.Setenv(k, ...) first, which restores it.
func unsetenv(t *testing.T, k string) {
	t.Helper()
	if err := os.Unsetenv(k); err != nil {
		t.Fatal(err)
	}
}

func TestConfigDiscoveryService(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "tern-ops")
	for addr, want := range map[string]int{
		":13478":         13478,
		"0.0.0.0:14000":  14000,
		"127.0.0.1:0":    0,
		"not an address": 0,
	} {
		if ns, port := configDiscoveryService(addr); ns != "tern-ops" || port != want {
			t.Errorf("configDiscoveryService(%q) = %q, %d, want tern-ops, %d", addr, ns, port, want)
		}
	}
	t.Setenv("POD_NAMESPACE", "")
	if ns, _ := configDiscoveryService(":13478"); ns != "" {
		t.Errorf("without POD_NAMESPACE: %q, want render's default (\"\")", ns)
	}
}
