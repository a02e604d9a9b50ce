package testenv

import (
	"testing"
	"time"
)

// Eventually calls f every 20 ms until it returns nil, and fails t with f's
// last error once within has passed: for what a controller, a watch or a
// dataplane makes true some time after the test acts.
func Eventually(t testing.TB, within time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
