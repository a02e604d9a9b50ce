package dataplane

import (
	"log/slog"

	"github.com/tern-gw/tern/dataplane/config"
)

// warnDeprecated logs one warning for each deprecated config field that
// cfg sets. Deprecated fields are still accepted, so that configs and
// scripts written for older versions load, but they have no effect.
func warnDeprecated(cfg *config.Config, log *slog.Logger) {
	if cfg.Limits.LegacyChannelNumbers {
		log.Warn("limits.legacyChannelNumbers is deprecated and has no effect: channel numbers 0x4000-0x7FFF are accepted by default; limits.strictChannelNumbers narrows them to RFC 8656's 0x4000-0x4FFF")
	}
}
