package dataplane

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tern-gw/tern/internal/testenv"
)

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
