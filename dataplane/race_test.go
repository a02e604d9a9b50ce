//go:build race

package dataplane

// raceEnabled is true when the tests run under the race detector (go test -race), whose
// runtime allocates where a normal build does not: sync.Pool drops a quarter of the values
// put back, at random, so pooled buffers (crypto/tls takes its record buffers from one) are
// allocated again.
const raceEnabled = true
