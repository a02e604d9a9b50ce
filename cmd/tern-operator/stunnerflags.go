package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tern-gw/tern/operator/cds"
)

// STUNner's gateway operator is configured by flags and environment variables that its Helm
// chart and manifests pass; tern-operator accepts every one, so those manifests run it
// unchanged. Each does what STUNner's does where Tern has the feature; the others are
// accepted and logged once at start as ignored, with why.

// The environment variables STUNner's operator reads.
const (
	envControllerName = "STUNNER_GATEWAY_OPERATOR_CONTROLLER_NAME"
	envDataplaneMode  = "STUNNER_GATEWAY_OPERATOR_DATAPLANE_MODE"
	envPprofAddr      = "STUNNER_GATEWAY_OPERATOR_PPROF_BIND_ADDRESS"
	envLabelFilter    = "STUNNER_GATEWAY_OPERATOR_LABEL_FILTER"
)

// stunnerFlags are STUNner's operator flags that Tern has no flag of its own for.
type stunnerFlags struct {
	dataplaneMode       string
	endpointDiscovery   bool
	enableFinalizer     bool
	throttleTimeout     string
	cdsAddr             string
	pprofAddr           string
	disableEndpointed   bool
	zapLogLevel         string
	zapDevel            bool
	zapEncoder          string
	zapStacktraceLevel  string
	zapTimeEncoding     string
	throttle            time.Duration // parsed throttleTimeout
	labelFilter         []string      // from envLabelFilter; nil when unset
	labelFilterFromEnv  bool
	dataplaneModeSource string
}

// addStunnerFlags defines STUNner's flags on fs, with STUNner's defaults except where noted.
func addStunnerFlags(fs *flag.FlagSet) *stunnerFlags {
	s := &stunnerFlags{}
	fs.StringVar(&s.dataplaneMode, "dataplane-mode", "managed",
		`STUNner's dataplane mode: "managed" (a dataplane per Gateway, what Tern does) or "legacy" (accepted and ignored: Tern always manages the dataplane; the disable-managed-dataplane Gateway annotation leaves it to you); default $`+envDataplaneMode+` or managed`)
	fs.BoolVar(&s.endpointDiscovery, "endpoint-discovery", true,
		"STUNner's endpoint discovery; Tern always puts backends' endpoints (EndpointSlices) and ClusterIPs into the config, so false is logged and ignored")
	fs.BoolVar(&s.enableFinalizer, "enable-finalizer", false,
		"STUNner's finalizer (delete dataplanes and invalidate statuses at operator exit); accepted and ignored: Tern leaves the dataplanes running when it stops")
	fs.StringVar(&s.throttleTimeout, "throttle-timeout", "0s",
		"wait this long after a change before rendering, so that a burst of changes renders once, as STUNner's (whose default is 250ms); 0 renders at once")
	fs.StringVar(&s.cdsAddr, "config-discovery-address", cds.DefaultAddr,
		"address of the config discovery service (STUNner's CDS API: GET /api/v1/configs, watch=true over WebSocket), which stunnerd, stunnerctl, turncat and ternd read; served by the leader; empty or 0 disables it")
	fs.StringVar(&s.pprofAddr, "pprof-bind-address", "0",
		"address of Go's profiling endpoints (/debug/pprof/); 0 disables them (default $"+envPprofAddr+" or 0)")
	fs.BoolVar(&s.disableEndpointed, "disable-endpontslice-controller", false,
		"STUNner's fallback to Endpoints (its spelling); accepted and ignored: Tern reads EndpointSlices")
	// controller-runtime's zap flags, which STUNner's operator binds.
	fs.StringVar(&s.zapLogLevel, "zap-log-level", "",
		"STUNner's log level (debug, info, error, panic, or a debug verbosity 1, 2, ...); sets --log-level unless that is given")
	fs.BoolVar(&s.zapDevel, "zap-devel", true, "STUNner's development logging; accepted and ignored: tern-operator logs JSON")
	fs.StringVar(&s.zapEncoder, "zap-encoder", "", "STUNner's log encoding (json or console); accepted and ignored: tern-operator logs JSON")
	fs.StringVar(&s.zapStacktraceLevel, "zap-stacktrace-level", "", "STUNner's stack trace level; accepted and ignored")
	fs.StringVar(&s.zapTimeEncoding, "zap-time-encoding", "", "STUNner's log time encoding; accepted and ignored")
	return s
}

// resolve validates the flags and applies the environment where STUNner reads it: set tells
// which flags the command line gave. It returns an error naming the flag.
func (s *stunnerFlags) resolve(set map[string]bool) error {
	s.dataplaneModeSource = "--dataplane-mode"
	if !set["dataplane-mode"] {
		if v := os.Getenv(envDataplaneMode); v != "" {
			s.dataplaneMode, s.dataplaneModeSource = v, "$"+envDataplaneMode
		}
	}
	switch strings.ToLower(s.dataplaneMode) {
	case "managed", "legacy":
		s.dataplaneMode = strings.ToLower(s.dataplaneMode)
	default:
		return fmt.Errorf("%s: want managed or legacy, got %q", s.dataplaneModeSource, s.dataplaneMode)
	}
	d, err := time.ParseDuration(s.throttleTimeout)
	if err != nil || d < 0 {
		return fmt.Errorf("--throttle-timeout: want a duration such as 250ms, got %q", s.throttleTimeout)
	}
	s.throttle = d
	if !set["pprof-bind-address"] {
		if v := os.Getenv(envPprofAddr); v != "" {
			s.pprofAddr = v
		}
	}
	if raw, ok := os.LookupEnv(envLabelFilter); ok {
		// As STUNner: the variable replaces the default list; set and empty copies every label.
		s.labelFilter, s.labelFilterFromEnv = []string{}, true
		for _, k := range strings.Split(raw, ",") {
			if k = strings.TrimSpace(k); k != "" {
				s.labelFilter = append(s.labelFilter, k)
			}
		}
	}
	if s.zapLogLevel != "" {
		if _, err := s.level(); err != nil {
			return err
		}
	}
	return nil
}

// level maps --zap-log-level onto tern-operator's levels: debug and the debug verbosities
// (1, 2, ...) to debug, info to info, error and panic to error.
func (s *stunnerFlags) level() (string, error) {
	switch v := strings.ToLower(s.zapLogLevel); v {
	case "debug", "info", "error":
		return v, nil
	case "panic":
		return "error", nil
	default:
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return "debug", nil
		}
		return "", fmt.Errorf("--zap-log-level: want debug, info, error, panic or an integer > 0, got %q", s.zapLogLevel)
	}
}

// logIgnored says once which of STUNner's flags were given that Tern ignores, and why.
func (s *stunnerFlags) logIgnored(log *slog.Logger, set map[string]bool) {
	ignored := func(flag, why string) { log.Info("ignoring STUNner operator flag "+flag+": "+why, "flag", flag) }
	if s.dataplaneMode == "legacy" {
		ignored(s.dataplaneModeSource+"=legacy", "Tern renders a dataplane per Gateway (managed mode); annotate a Gateway with stunner.l7mp.io/disable-managed-dataplane to run its dataplane yourself from its ConfigMap")
	}
	if set["endpoint-discovery"] && !s.endpointDiscovery {
		ignored("--endpoint-discovery=false", "Tern always puts the backends' endpoints and ClusterIPs into the dataplane config")
	}
	if set["enable-finalizer"] && s.enableFinalizer {
		ignored("--enable-finalizer", "Tern leaves the dataplanes and statuses in place when the operator stops, so TURN sessions survive operator restarts")
	}
	if set["disable-endpontslice-controller"] {
		ignored("--disable-endpontslice-controller", "Tern reads EndpointSlices (discovery.k8s.io/v1)")
	}
	for _, f := range []string{"zap-devel", "zap-encoder", "zap-stacktrace-level", "zap-time-encoding"} {
		if set[f] {
			ignored("--"+f, "tern-operator logs JSON through log/slog; --log-level sets its level")
		}
	}
	if s.labelFilterFromEnv {
		log.Info("Gateway label filter from $"+envLabelFilter, "filter", s.labelFilter)
	}
}
