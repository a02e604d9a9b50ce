package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/tern-gw/tern/dataplane"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/config/loglevel"
	"github.com/tern-gw/tern/dataplane/config/offloadmode"
)

// flags are ternd's command line. They take stunnerd's GNU-style spellings
// (-c/--config, -l/--log, -w/--watch, -u/--udp-thread-num, -v, -d, -i,
// --log-format, ...), because STUNner's Dataplanes and Helm charts pass
// them, and ternd's own flags. Go flag-package spellings that earlier
// ternd releases documented (-udp-thread-num, --w) still work:
// normalizeArgs rewrites them.
type flags struct {
	fs *flag.FlagSet

	cfgPath, gwPath, gwName, cmRef, cmKey, kubecfg string
	level, logFormat, id, pprofAt, ioMode          string
	takeover, takeoverOrStart                      bool
	takeoverExitAt, afterHandover                  string
	prepareHandoverDir, handoverDirOwner           string
	offloadEngine                                  string
	offloadAttach                                  string
	watch, verbose, showVer, gso, legacyChannels   bool
	cfgFromEnv                                     bool // cfgPath is $STUNNER_CONFIG_ORIGIN
	packetCounters, strictChannels                 bool
	tcpEventLoops                                  bool
	threads, relays, bufs                          int
	stateBudgetMiB, memoryLimitMiB                 int
	grace, linger                                  time.Duration

	// ignored are stunnerd's flags that mean nothing to ternd, with why;
	// the ones given are logged once at start.
	ignored map[string]string
}

// envConfigOrigin is stunnerd's config origin variable, STUNNER_CONFIG_ORIGIN: ternd reads
// it, as stunnerd does, only when neither -c, -f nor a TURN URI is given.
const envConfigOrigin = "STUNNER_CONFIG_ORIGIN"

// ignoredStunnerdFlags are stunnerd flags ternd accepts and ignores, with
// the reason it logs. Values are taken as strings whatever their type in
// stunnerd, except for the booleans, which must not swallow the next
// argument.
var ignoredStunnerdFlags = []struct {
	name, short, reason string
	isBool              bool
}{
	{"dry-run", "d", "ternd has no side effects to suppress beyond serving TURN", true},
	{"force-ready-status", "", "ternd's /live stays up while it drains", true},
	{"sni", "", "tunnel mode only", false},
	{"insecure", "", "tunnel mode only", true},
	// The flags stunnerd's "-c k8s" uses to find the config discovery
	// service through the Kubernetes API; ternd takes its address in -c.
	{"cds-server-address", "", "give the config discovery service's address in -c (http://address:13478)", false},
	{"cds-server-namespace", "", "give the config discovery service's address in -c (http://address:13478)", false},
	{"cds-server-port", "", "give the config discovery service's address in -c (http://address:13478)", false},
	{"context", "", "only for finding stunnerd's config discovery service", false},
	{"namespace", "n", "only for finding stunnerd's config discovery service; --configmap takes namespace/name", false},
	{"cluster", "", "only for finding stunnerd's config discovery service", false},
	{"user", "", "only for finding stunnerd's config discovery service", false},
	{"server", "s", "only for finding stunnerd's config discovery service", false},
	{"token", "", "only for finding stunnerd's config discovery service", false},
	{"request-timeout", "", "only for finding stunnerd's config discovery service", false},
}

func newFlags() *flags {
	f := &flags{fs: flag.NewFlagSet("ternd", flag.ContinueOnError), ignored: map[string]string{}}
	fs := f.fs
	fs.SortFlags = false
	fs.StringVarP(&f.cfgPath, "config", "c", "", "config origin: a dataplane config file, Tern's format or stunnerd's (stunnerd.conf), as a path or file://<path>; or a config discovery service, http://address:13478 (ws://, https://, wss://, or address:port), watched for the Gateway -i names (default $STUNNER_CONFIG_ORIGIN)")
	fs.StringVarP(&f.gwPath, "manifests", "f", "", "standalone mode: Gateway API manifests (GatewayClass, GatewayConfig, Gateway, routes, ...) to render the config from, as tern-operator would")
	fs.StringVar(&f.gwName, "gateway", "", "with -f: namespace/name of the Gateway to serve; default the first in the file")
	fs.StringVar(&f.cmRef, "configmap", os.Getenv("TERN_CONFIGMAP"), "watch this ConfigMap (namespace/name, or name in $POD_NAMESPACE) through the Kubernetes API and apply its config live")
	fs.StringVar(&f.cmKey, "configmap-key", "tern.yaml", "key of the config in the ConfigMap")
	fs.StringVar(&f.kubecfg, "kubeconfig", "", "kubeconfig for --configmap; default $KUBECONFIG, ~/.kube/config, then in-cluster")
	fs.StringVarP(&f.level, "log", "l", "", "log level: trace, debug, info, warn, error, disable, or STUNner's scope:LEVEL list (all:INFO,turn:DEBUG); overrides the config's log level")
	fs.StringVar(&f.logFormat, "log-format", "text", "log output format: text or json")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "debug logging, as -l all:DEBUG (an explicit -l wins)")
	fs.StringVarP(&f.id, "id", "i", "", "the Gateway's namespace/name (stunnerd's id): whose config to watch at a config discovery service, and the dataplane name in logs when the config names none; default $STUNNER_NAMESPACE/$STUNNER_NAME")
	fs.BoolVarP(&f.watch, "watch", "w", false, "watch the config file and apply changes live")
	fs.StringVar(&f.pprofAt, "pprof", "", "serve Go's profiling endpoints (/debug/pprof/) on this address, e.g. 127.0.0.1:6060; off by default, never on a public address")
	fs.IntVarP(&f.threads, "udp-thread-num", "u", 0, "sockets (and reader threads) per TURN-UDP listener; 0 means the number of CPUs")
	fs.IntVar(&f.relays, "relay-thread-num", 0, "epoll workers serving relay sockets; 0 means the number of CPUs")
	fs.IntVar(&f.bufs, "socket-buffer", 4<<20, "SO_RCVBUF/SO_SNDBUF of listener sockets, bytes")
	fs.BoolVar(&f.strictChannels, "strict-channel-numbers", false, "accept only RFC 8656's channel numbers 0x4000-0x4FFF in ChannelBind (as limits.strictChannelNumbers); by default RFC 5766's 0x4000-0x7FFF are accepted, which coturn's turnutils_uclient uses")
	fs.IntVar(&f.stateBudgetMiB, "state-budget-mib", 0, "memory budget for allocations, permissions and channel bindings, MiB (as limits.stateBudgetMiB, which it overrides): past it Allocate, CreatePermission and ChannelBind get 508; -1 turns it off; 0 takes the config's, or half the container's memory limit, or 256 MiB")
	fs.IntVar(&f.memoryLimitMiB, "memory-limit-mib", 0, "the memory limit ternd runs under, MiB, where the container's cannot be read (cgroup v2 memory.max, v1 memory.limit_in_bytes): the default state budget is half of it, and Go's memory limit 90% of it unless GOMEMLIMIT is set; 0 reads the container's")
	fs.BoolVar(&f.legacyChannels, "legacy-channel-numbers", false, "deprecated, no effect: channel numbers 0x4000-0x7FFF are accepted by default (see --strict-channel-numbers)")
	fs.BoolVar(&f.packetCounters, "packet-counters", true, "count packets and bytes per listener, cluster and peer direction for /metrics (per-worker counters); false leaves those series at 0, to measure what counting costs")
	fs.BoolVar(&f.gso, "gso", true, "send runs of same-size datagrams to one destination as one UDP GSO message (Linux 4.18+; off where unsupported)")
	fs.StringVar(&f.offloadEngine, "offload-engine", "", "eBPF ChannelData fast path for TURN-UDP listeners: None, Auto (falls back to sockets where BPF is refused), XDP or TC; overrides the config's offload.engine (docs/offload-control.md)")
	fs.StringVar(&f.offloadAttach, "offload-attach", "", "how the offload's tc program attaches: Auto (tcx where the kernel has it, Linux 6.6 on, else a clsact qdisc with a direct-action bpf filter), TCX or Clsact; overrides the config's offload.attach (docs/offload.md)")
	fs.DurationVar(&f.linger, "linger", 0, "with --io threads: while datagrams reach a UDP listener or relay worker closer together than this, the worker sleeps this long between polls instead of waking for each (fewer wake-ups under many interleaved flows, at most this much added delay); 0 wakes for each datagram")
	fs.BoolVar(&f.tcpEventLoops, "tcp-event-loops", true, "Linux: serve TURN-TCP client connections, and TURN-TLS ones once their handshake is done, from a few epoll loops (raw sockets outside the Go netpoller) instead of a reader goroutine each; false gives each connection its reader goroutine (bench/PROFILE.md, \"TURN-TCP on event loops, outside the netpoller\", \"TURN-TLS on the event loops\")")
	fs.StringVar(&f.ioMode, "io", dataplane.IOThreads, "how workers wait for packets: threads (blocking system calls, one thread per worker) or poller (Go netpoller)")
	fs.BoolVar(&f.takeover, "takeover", false, "take the TURN-UDP sockets and allocations over from the ternd running with the same config, through its hand-over socket (admin.handoverSocket), instead of opening them; that ternd exits once this one serves and its last TCP or TLS connection has closed (docs/operations.md, Upgrades)")
	fs.BoolVar(&f.takeoverOrStart, "takeover-or-start", false, "take over as --takeover does when a ternd answers on the hand-over socket; start afresh when the socket file is missing or nothing listens on it; exit 1 on any other failure (a timeout, an abort), as --takeover does (rendered DaemonSet pods: docs/operations.md, Upgrades)")
	fs.StringVar(&f.afterHandover, "after-handover", afterHandoverExit, "what this ternd does once a successor has taken over: exit (0, once its TCP and TLS connections have closed) or wait (serve those connections, without health or metrics endpoints, until SIGTERM or SIGINT, then exit 0: a pod's container must not exit, or the kubelet restarts it)")
	fs.StringVar(&f.prepareHandoverDir, "prepare-handover-dir", "", "make this directory for the hand-over socket (mode 0700, owned by --handover-dir-owner) and exit: a rendered pod's init container runs it as root")
	fs.StringVar(&f.handoverDirOwner, "handover-dir-owner", "", "with --prepare-handover-dir, the directory's owner: UID:GID")
	fs.StringVar(&f.takeoverExitAt, "takeover-exit-at", "", "for tests: with --takeover, exit at once (SIGKILL) at this step of the hand-over: hello, received or imported")
	_ = fs.MarkHidden("takeover-exit-at")
	fs.DurationVar(&f.grace, "grace-period", time.Hour, "on SIGTERM, how long existing allocations may keep relaying before ternd exits (a second signal exits at once)")
	fs.BoolVar(&f.showVer, "version", false, "print the version and the git revision, and exit")
	for _, ig := range ignoredStunnerdFlags {
		usage := "stunnerd flag, accepted and ignored: " + ig.reason
		if ig.isBool {
			fs.BoolP(ig.name, ig.short, false, usage)
		} else {
			fs.StringP(ig.name, ig.short, "", usage)
		}
		f.ignored[ig.name] = ig.reason
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `ternd: Tern's TURN dataplane

Usage:
    ternd -c <config file> [options]     Tern's or stunnerd's config file
    ternd -c http://<address>:13478 -i <namespace>/<gateway> [options]
                                         a config discovery service (tern-operator's or STUNner's)
    ternd -f <manifests> [options]       Gateway API manifests, rendered as tern-operator would
    ternd [options] turn://user:pass@address:port?transport=udp
                                         one listener, as stunnerd's default config

Options:
`)
		fs.PrintDefaults()
	}
	return f
}

// parse parses args, after normalizeArgs. It returns the exit code to
// leave with, or -1 to run: 0 after -h/--help (usage on stdout), 2 on a
// bad command line (the error and usage on stderr).
func (f *flags) parse(args []string, stdout, stderr io.Writer) int {
	f.fs.SetOutput(io.Discard)
	err := f.fs.Parse(normalizeArgs(f.fs, args))
	switch {
	case err == flag.ErrHelp:
		f.fs.SetOutput(stdout)
		f.fs.Usage()
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "ternd: %v\n", err)
		f.fs.SetOutput(stderr)
		f.fs.Usage()
		return 2
	}
	switch f.logFormat {
	case "text", "json":
	default:
		fmt.Fprintf(stderr, "ternd: --log-format: want text or json, got %q\n", f.logFormat)
		return 2
	}
	if f.afterHandover != afterHandoverExit && f.afterHandover != afterHandoverWait {
		fmt.Fprintf(stderr, "ternd: --after-handover: want exit or wait, got %q\n", f.afterHandover)
		return 2
	}
	if f.prepareHandoverDir != "" {
		if _, _, err := parseOwner(f.handoverDirOwner); err != nil {
			fmt.Fprintf(stderr, "ternd: --handover-dir-owner: %v\n", err)
			return 2
		}
		return -1
	}
	if f.offloadEngine != "" {
		m, err := offloadmode.NormalizeEngine(f.offloadEngine)
		if err != nil {
			fmt.Fprintf(stderr, "ternd: --offload-engine: %v\n", err)
			return 2
		}
		f.offloadEngine = m
	}
	if f.offloadAttach != "" {
		a, err := offloadmode.NormalizeAttach(f.offloadAttach)
		if err != nil {
			fmt.Fprintf(stderr, "ternd: --offload-attach: %v\n", err)
			return 2
		}
		f.offloadAttach = a
	}
	if f.cfgPath == "" && f.gwPath == "" && f.fs.NArg() == 0 {
		// stunnerd's config origin when the command line names none. Tern's
		// rendered pods always give -c, so there it is never read, whatever
		// STUNner's operator would have put in it.
		if origin := os.Getenv(envConfigOrigin); origin != "" {
			f.cfgPath, f.cfgFromEnv = origin, true
		}
	}
	if f.id == "" && os.Getenv("STUNNER_NAME") != "" {
		// stunnerd's default id, from the variables STUNner's pods set.
		f.id = strings.TrimPrefix(os.Getenv("STUNNER_NAMESPACE")+"/"+os.Getenv("STUNNER_NAME"), "/")
	}
	return -1
}

// normalizeArgs rewrites Go flag-package spellings to pflag's: a long flag
// with one dash ("-udp-thread-num=16", "-gateway x") gets two, and a
// shorthand with two ("--w") gets one. Arguments after "--" and values are
// left alone.
func normalizeArgs(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		switch {
		case strings.HasPrefix(a, "--"):
			name, _, _ := strings.Cut(a[2:], "=")
			if len(name) == 1 && fs.ShorthandLookup(name) != nil {
				a = a[1:]
			}
		case strings.HasPrefix(a, "-") && len(a) > 2:
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && fs.Lookup(name) != nil {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

// logIgnored says once, at info, which of stunnerd's flags were given that
// ternd ignores.
func (f *flags) logIgnored(log *slog.Logger) {
	f.fs.Visit(func(fl *flag.Flag) {
		if reason, ok := f.ignored[fl.Name]; ok {
			log.Info(fmt.Sprintf("ignoring stunnerd flag --%s: %s", fl.Name, reason))
		}
	})
}

// logLevel is the level to run at: -l, else all:DEBUG under -v, else the
// config's. fromFlags says the command line decided, so the config's level
// stops mattering.
func (f *flags) logLevel(cfg *config.Config) (level string, fromFlags bool) {
	switch {
	case f.level != "":
		return f.level, true
	case f.verbose:
		return "all:DEBUG", true
	}
	return cfg.Admin.LogLevel, false
}

// newLogger makes ternd's logger in the chosen format, naming STUNner's
// TRACE and DISABLE levels rather than printing DEBUG-4.
func newLogger(format string, w io.Writer, lvl slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.LevelKey {
			if l, ok := a.Value.Any().(slog.Level); ok && l <= loglevel.Trace {
				a.Value = slog.StringValue("TRACE")
			}
		}
		return a
	}}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
