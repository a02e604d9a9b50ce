// Package enginesettings maps a dataplane config (dataplane/config) to the
// TURN engine's settings (turn.Settings): realm, quotas, lifetimes in
// seconds to time.Duration, the auth-failure throttle, STUN mode, and the
// authenticator, reading the credential files a config names
// (dataplane/secretfile).
package enginesettings

import (
	"fmt"
	"os"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/dataplane/secretfile"
	"github.com/tern-gw/tern/turn"
)

// From maps the config's stunMode, auth and limits to the engine's. The
// config's NoLimit (-1) is the engine's 0 (off); defaults are already in
// cfg (config.SetDefaults). It reads the credential files the config names
// (auth.passwordFile, auth.sharedSecretFile) and fails when one cannot be
// read, with secretfile's error naming the field and the path. What
// ternd's flags add (the state budget, strict channel numbers) and the
// alternates are the dataplane's to set.
func From(cfg *config.Config) (turn.Settings, error) {
	on := func(v int) int { return max(v, 0) }
	st := turn.Settings{
		Realm:                cfg.Auth.Realm,
		MaxLifetime:          time.Duration(cfg.Limits.MaxLifetime) * time.Second,
		NonceLifetime:        time.Duration(cfg.Limits.NonceLifetime) * time.Second,
		AllocationsPerUser:   on(cfg.Limits.AllocationsPerUser),
		AllocationsPerIP:     on(cfg.Limits.AllocationsPerIP),
		MaxAllocations:       on(cfg.Limits.MaxAllocations),
		StrictChannelNumbers: cfg.Limits.StrictChannelNumbers,
		STUNOnly:             cfg.STUNMode,
	}
	if cfg.Limits.AuthFailureBurst > 0 && cfg.Limits.AuthFailureRate > 0 {
		st.AuthFailureBurst, st.AuthFailureRate = cfg.Limits.AuthFailureBurst, float64(cfg.Limits.AuthFailureRate)
	}
	if cfg.STUNMode {
		// No TURN request is authenticated in STUN mode, so credentials
		// are optional (config.Validate) and not read; the engine still
		// wants an Authenticator, and one that knows no user will do.
		st.Auth = turn.StaticAuth{Username: "\x00"}
		return st, nil
	}
	// Credentials in files (a mounted Secret) are read here, so that a
	// file that cannot be read rejects the config like any invalid field.
	auth, err := secretfile.Read(cfg.Auth, os.ReadFile)
	if err != nil {
		return st, err
	}
	switch auth.Type {
	case config.AuthStatic:
		st.Auth = turn.StaticAuth{Username: auth.Username, Password: auth.Password}
	case config.AuthEphemeral:
		st.Auth = turn.EphemeralAuth{Secret: auth.SharedSecret}
	default:
		return st, fmt.Errorf("auth.type: unknown %q", cfg.Auth.Type)
	}
	return st, nil
}
