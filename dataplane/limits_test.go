package dataplane

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/dataplane/config"
	"github.com/tern-gw/tern/internal/testenv"
)

// TestDefaultLimitsReachTheEngine: a config that sets no limits runs with
// the quotas and the throttle on; NoLimit turns each off.
func TestDefaultLimitsReachTheEngine(t *testing.T) {
	cfg := testConfig(t, 29900, 29999)
	st, err := engineSettings(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.AllocationsPerIP != config.DefaultAllocationsPerIP || st.MaxAllocations != 0 || st.AllocationsPerUser != 0 ||
		st.AuthFailureBurst != config.DefaultAuthFailureBurst || st.AuthFailureRate != config.DefaultAuthFailureRate {
		t.Errorf("engine settings from defaults: %+v", st)
	}
	cfg.Limits.AllocationsPerIP, cfg.Limits.MaxAllocations, cfg.Limits.AuthFailureRate = config.NoLimit, config.NoLimit, config.NoLimit
	if st, _ = engineSettings(cfg); st.AllocationsPerIP != 0 || st.MaxAllocations != 0 || st.AuthFailureBurst != 0 {
		t.Errorf("engine settings with NoLimit: %+v", st)
	}
	// Channel numbers: RFC 5766's range unless limits.strictChannelNumbers;
	// the deprecated legacyChannelNumbers changes nothing.
	if st.StrictChannelNumbers {
		t.Error("StrictChannelNumbers on by default")
	}
	cfg.Limits.LegacyChannelNumbers = true
	if st, _ = engineSettings(cfg); st.StrictChannelNumbers {
		t.Error("legacyChannelNumbers turned StrictChannelNumbers on")
	}
	cfg.Limits.StrictChannelNumbers = true
	if st, _ = engineSettings(cfg); !st.StrictChannelNumbers {
		t.Error("limits.strictChannelNumbers did not reach the engine")
	}
}

// TestQuotaRefusalIsCounted: one client address over its quota gets 486,
// counted in tern_refused_requests_total.
func TestQuotaRefusalIsCounted(t *testing.T) {
	cfg := testConfig(t, 29900, 29909)
	cfg.Limits.AllocationsPerIP = 2
	startWith(t, cfg)
	for i := range 3 {
		_, err := pionClient(t, cfg, "user", "pass").Allocate()
		if i < 2 && err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if i == 2 && (err == nil || !strings.Contains(err.Error(), "486")) {
			t.Fatalf("allocation over the per-IP quota: %v, want 486", err)
		}
	}
	testenv.Eventually(t, 2*time.Second, func() error {
		if got := metric(t, cfg, `tern_refused_requests_total{reason="quota_ip"}`); got != "1" {
			return fmt.Errorf("quota_ip refusals = %s, want 1", got)
		}
		return nil
	})
	if got := metric(t, cfg, `tern_dropped_packets_total{reason="throttled"}`); got != "0" {
		t.Errorf("throttled drops = %s", got)
	}
}
