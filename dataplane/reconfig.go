package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/tern-gw/tern/dataplane/allowlist"
	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/listener"
	"github.com/tern-gw/tern/dataplane/relay"
	"github.com/tern-gw/tern/dataplane/relaybind"
	"github.com/tern-gw/tern/dataplane/secretfile"
)

// Reconfigure applies a new config to the running server by the reconcile
// rules STUNner documents for Gateway and GatewayConfig changes (see
// docs/config-reference.md, "Live reconfiguration"):
//   - auth, limits, routes and clusters change in place; permissions and
//     channels to peers no longer allowed are dropped, allocations stay
//     (credential files are read again, and watched: credentials.go);
//   - a listener added or removed starts or stops only that listener;
//   - a listener whose protocol, address, port or certificate paths
//     changed is restarted alone (new certificate contents are reloaded by
//     the listener itself);
//   - a realm or relay change restarts every listener.
//
// A config that fails validation is rejected with an error that names the
// field, and the running config stays. A listener that fails to start is
// reported in the error; the rest of the change is applied.
//
// Reconfigurations are serialized by changeMu (as are Start and Close).
// Listeners and the admin endpoints are stopped and started without the
// server lock mu, so that what takes mu (Config, the credential files'
// reload, a STRICT_DNS refresh) never waits for a socket to close or bind;
// the config, the credentials and the engine's settings are swapped under
// mu in one step, after the listeners that must go have stopped and before
// the new ones start, so a listener always starts under the config in force.
func (s *Server) Reconfigure(next *config.Config) error {
	if err := next.Validate(); err != nil {
		return fmt.Errorf("config rejected, running config kept: %w", err)
	}
	settings, err := s.settingsFor(next)
	warnDeprecated(next, s.log)
	if err != nil {
		return fmt.Errorf("config rejected, running config kept: %w", err)
	}
	// Checked here, applied (and logged) below if the relay changed.
	if _, err := relay.ParseAddrs(relaybind.Addresses(next.Relay, slog.New(slog.DiscardHandler))); err != nil {
		return fmt.Errorf("config rejected, running config kept: %w", err)
	}
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.mu.Lock()
	closed, prev := s.closed, s.cfg
	s.mu.Unlock()
	if closed {
		return errors.New("server closed")
	}
	select {
	case <-s.handedOver:
		// The successor serves the handed-over sockets and reads the
		// config itself; restarting a listener here would take them back.
		return errors.New("handed over to a successor: it applies config changes")
	default:
	}
	if prevMode, nextMode := prev.Offload.EngineMode(), next.Offload.EngineMode(); prevMode != nextMode || !slices.Equal(prev.Offload.Interfaces, next.Offload.Interfaces) ||
		prev.Offload.AttachMode() != next.Offload.AttachMode() {
		s.log.Warn("offload settings changed: they take effect when ternd restarts", "running", prevMode, "configured", nextMode)
	}

	// Stop what goes: every listener on a realm or relay change, else those
	// removed and those that can only change by a restart.
	relayChanged := !prev.Relay.Equal(next.Relay)
	restartAll := prev.Auth.Realm != next.Auth.Realm || relayChanged
	want := map[string]config.Listener{}
	for _, lc := range next.Listeners {
		want[lc.Name] = lc
	}
	for name, l := range s.runningListeners() {
		lc, kept := want[name]
		switch {
		case restartAll && relayChanged:
			s.stopListener(name, "relay changed")
		case restartAll:
			s.stopListener(name, "realm changed")
		case !kept:
			s.stopListener(name, "removed")
		case needsRestart(l, lc):
			s.stopListener(name, "protocol, address, port or certificate paths changed")
		}
	}
	if relayChanged {
		// Every allocation went with the listeners.
		nextRelays, _ := relay.ParseAddrs(relaybind.Addresses(next.Relay, s.log)) // checked above
		s.relays.Reset(nextRelays)
	}

	// Swap the config, the credentials and the engine's settings.
	s.mu.Lock()
	if err := s.engine.Reconfigure(settings); err != nil {
		s.mu.Unlock()
		return err
	}
	s.auth = settings.Auth
	s.cfg = next
	if s.secrets != nil {
		s.secrets.SetFiles(secretfile.Files(next.Auth))
	}
	s.setClusters(next)
	s.setLogLevel(next)
	s.mu.Unlock()

	// Start what comes, and update the listeners that stay in place.
	var errs []error
	if prev.Admin.HealthAddress != next.Admin.HealthAddress || prev.Admin.MetricsAddress != next.Admin.MetricsAddress {
		s.http.Close()
		if s.http, err = s.startAdmin(next.Admin); err != nil {
			errs = append(errs, err)
		}
	}
	s.dns.SetClusters(next.Clusters)
	running := s.runningListeners()
	var start []config.Listener
	for _, lc := range next.Listeners {
		l, ok := running[lc.Name]
		if !ok {
			start = append(start, lc)
			continue
		}
		al, err := allowlist.Build(lc.Routes, next.Clusters, s.ownAddrs(next), s.dns.Lookup, &s.clusterIDs)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.SetSpec(lc)
		l.SetAllowlist(al)
		l.SetConnLimits(connLimits(next))
	}
	if s.offload != nil {
		// Listeners that went have withdrawn their paths (CloseTransport).
		s.offload.SetListeners(next, relaybind.Addresses(next.Relay, slog.New(slog.DiscardHandler)))
	}
	if err := s.startListeners(next, start); err != nil {
		errs = append(errs, err)
	}
	// Routes may have shrunk: drop permissions and channels to peers the
	// new allowlists refuse.
	s.engine.Revalidate()
	s.ready.Store(s.running() > 0)
	s.log.Info("config applied", "listeners", s.running(), "restart_all", restartAll)
	return errors.Join(errs...)
}

// runningListeners returns a copy of the running listeners by name.
func (s *Server) runningListeners() map[string]listener.Listener {
	s.listenersMu.Lock()
	defer s.listenersMu.Unlock()
	running := make(map[string]listener.Listener, len(s.listeners))
	for n, l := range s.listeners {
		running[n] = l
	}
	return running
}

// needsRestart reports whether a listener change can only be applied by
// restarting it: protocol, address, port, or the certificate's paths. New
// contents at the same paths (a Secret renewed in place) need no restart:
// the listener's certificate holder reloads them, and its allocations stay.
func needsRestart(l listener.Listener, next config.Listener) bool {
	cur := l.Spec()
	return cur.Protocol != next.Protocol || cur.Address != next.Address || cur.Port != next.Port ||
		cur.Cert != next.Cert || cur.Key != next.Key
}
