package dataplane

import (
	"fmt"

	"github.com/tern-gw/tern/dataplane/config"
)

// The kernel fast path is run by dataplane/offload/mirror, which the
// server opens in New (when the mode is not None), hands to the engine as
// its turn.PathObserver, follows listener changes with in Reconfigure, and
// reads for /metrics (metrics.go).

// offloadMode returns the engine mode in force: ternd's --offload-engine
// when given, else the config's.
func offloadMode(cfg *config.Config, flag string) (string, error) {
	if flag != "" {
		m, err := config.NormalizeOffloadEngine(flag)
		if err != nil {
			return "", fmt.Errorf("--offload-engine: %w", err)
		}
		return m, nil
	}
	return cfg.Offload.EngineMode(), nil
}
