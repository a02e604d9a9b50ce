package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tern-gw/tern/dataplane/cdsclient"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/stunnerdconf"
)

// envNodeName is the variable STUNner's pods set to spec.nodeName, which
// stunnerd sends the config discovery service as "node".
const envNodeName = "STUNNER_NODENAME"

// cdsSource is ternd's config from a config discovery service (`-c
// http://...`, ws://, or STUNNER_CONFIG_ORIGIN): the watch of the Gateway's
// config, as stunnerd watches it. The watch runs from the start until
// close. Its first good config is what load returns (ternd starts from
// it); later ones are applied live through setApply's function. A config
// that does not load is logged, counted (rejected, and
// tern_configs_rejected_total once the server runs) and dropped, and the
// running config stays; so does a deletion (STUNner's zero config), as
// stunnerd's watch ignores deletions, and so does the running config while
// the server is away: the watch reconnects with backoff.
type cdsSource struct {
	url    string
	getenv func(string) string
	cf     *configFile // reads configs in stunnerd's format (STUNner's operator's CDS)
	log    atomic.Pointer[slog.Logger]
	cancel context.CancelFunc

	mu     sync.Mutex
	apply  func(*config.Config) error // nil until the server runs
	reject func()                     // counts a rejection in the server's metrics; nil until it runs
	latest *config.Config             // the last good config, until apply is set
	loaded *config.Config             // what load returned
	first  chan struct{}              // closed when latest is first set
	once   sync.Once

	// rejected counts the configs that did not load.
	rejected atomic.Uint64
}

// newCDSSource starts watching the Gateway id ("namespace/name") at origin.
func newCDSSource(origin, id string, cf *configFile, log *slog.Logger) (*cdsSource, error) {
	ns, name, ok := strings.Cut(id, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("the config discovery service serves a Gateway's config by its namespace/name: give -i namespace/name or set STUNNER_NAMESPACE and STUNNER_NAME (got %q)", id)
	}
	u, err := cdsclient.WatchURL(origin, ns, name, os.Getenv(envNodeName))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &cdsSource{url: u, getenv: os.Getenv, cf: cf, cancel: cancel, first: make(chan struct{})}
	s.log.Store(log)
	go func() { _ = cdsclient.Watch(ctx, u, s.handle, s.logger()) }()
	return s, nil
}

func (s *cdsSource) logger() *slog.Logger { return s.log.Load() }

// load waits for the first good config. The argument (the source's name)
// is ignored.
func (s *cdsSource) load(string) (*config.Config, error) {
	s.logger().Info("waiting for the Gateway's config from the config discovery service", "url", s.url)
	<-s.first
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded = s.latest
	return s.loaded, nil
}

// setApply hands the configs that come from now on to apply, and first
// applies the one that came since load, if any. reject counts each config
// refused from now on (and those refused before) in the server's metrics.
func (s *cdsSource) setApply(apply func(*config.Config) error, reject func(), log *slog.Logger) {
	s.log.Store(log)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apply, s.reject = apply, reject
	for range s.rejected.Load() {
		reject()
	}
	if s.latest != nil && s.latest != s.loaded {
		s.applyLocked(s.latest)
	}
	s.latest = nil
}

func (s *cdsSource) close() { s.cancel() }

// handle takes one message of the watch.
func (s *cdsSource) handle(msg []byte) {
	log := s.logger()
	cfg, deleted, err := s.decode(msg)
	switch {
	case err != nil:
		n := s.countRejected()
		log.Error("config from the config discovery service rejected; running config kept", "url", s.url, "error", err, "rejected_total", n)
		return
	case deleted:
		log.Info("the config discovery service reports the Gateway deleted; running config kept", "url", s.url)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apply == nil {
		s.latest = cfg
		s.once.Do(func() { close(s.first) })
		return
	}
	s.applyLocked(cfg)
}

// countRejected counts a config that did not load.
func (s *cdsSource) countRejected() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.rejected.Add(1)
	if s.reject != nil {
		s.reject()
	}
	return n
}

func (s *cdsSource) applyLocked(cfg *config.Config) {
	log := s.logger()
	if err := s.apply(cfg); err != nil {
		n := s.rejected.Add(1)
		s.reject()
		log.Error("reconfiguration from the config discovery service failed", "url", s.url, "error", err, "rejected_total", n)
		return
	}
	log.Info("config from the config discovery service applied", "url", s.url)
}

// decode reads a served config: Tern's document under "tern"
// (render.CDSTernKey) when
// tern-operator serves it, else STUNner's v1 config (STUNner's operator),
// read as a stunnerd config file is. deleted reports STUNner's zero config
// (no listener and no cluster), how a CDS says the Gateway is gone.
func (s *cdsSource) decode(msg []byte) (cfg *config.Config, deleted bool, err error) {
	var top struct {
		Tern      json.RawMessage   `json:"tern"`
		Listeners []json.RawMessage `json:"listeners"`
		Clusters  []json.RawMessage `json:"clusters"`
	}
	if err := json.Unmarshal(msg, &top); err != nil {
		return nil, false, fmt.Errorf("not a JSON config: %w", err)
	}
	if len(top.Tern) > 0 && string(top.Tern) != "null" {
		cfg, err := config.Parse(top.Tern, s.getenv)
		return cfg, false, err
	}
	if len(top.Listeners) == 0 && len(top.Clusters) == 0 {
		return nil, true, nil
	}
	cfg, notes, err := stunnerdconf.Parse(msg, stunnerdconf.Options{Getenv: s.getenv, WriteTLS: s.cf.writeTLS})
	if err != nil {
		return nil, false, errors.Join(errors.New("stunnerd config"), err)
	}
	for _, n := range notes {
		s.logger().Info("stunnerd config: "+n, "url", s.url)
	}
	return cfg, false, nil
}
