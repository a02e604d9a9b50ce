//go:build !race

package dataplane

// raceEnabled: see race_test.go.
const raceEnabled = false
