package enginesettings

import (
	"testing"

	"github.com/tern-gw/tern/dataplane/config"
)

// TestDefaultLimitsReachTheEngine: a config that sets no limits runs with
// the quotas and the throttle on; NoLimit turns each off.
func TestDefaultLimitsReachTheEngine(t *testing.T) {
	cfg, err := config.Parse([]byte(`
version: v1
auth: {type: static, realm: stunner.l7mp.io, username: user, password: pass}
listeners:
  - {name: udp, protocol: TURN-UDP, address: 127.0.0.1, port: 3478, routes: [local]}
clusters:
  - {name: local, endpoints: ["127.0.0.1/32"]}
relay: {address: 127.0.0.1}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := From(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.AllocationsPerIP != config.DefaultAllocationsPerIP || st.MaxAllocations != 0 || st.AllocationsPerUser != 0 ||
		st.AuthFailureBurst != config.DefaultAuthFailureBurst || st.AuthFailureRate != config.DefaultAuthFailureRate {
		t.Errorf("engine settings from defaults: %+v", st)
	}
	cfg.Limits.AllocationsPerIP, cfg.Limits.MaxAllocations, cfg.Limits.AuthFailureRate = config.NoLimit, config.NoLimit, config.NoLimit
	if st, _ = From(cfg); st.AllocationsPerIP != 0 || st.MaxAllocations != 0 || st.AuthFailureBurst != 0 {
		t.Errorf("engine settings with NoLimit: %+v", st)
	}
	// Channel numbers: RFC 5766's range unless limits.strictChannelNumbers;
	// the deprecated legacyChannelNumbers changes nothing.
	if st.StrictChannelNumbers {
		t.Error("StrictChannelNumbers on by default")
	}
	cfg.Limits.LegacyChannelNumbers = true
	if st, _ = From(cfg); st.StrictChannelNumbers {
		t.Error("legacyChannelNumbers turned StrictChannelNumbers on")
	}
	cfg.Limits.StrictChannelNumbers = true
	if st, _ = From(cfg); !st.StrictChannelNumbers {
		t.Error("limits.strictChannelNumbers did not reach the engine")
	}
}
