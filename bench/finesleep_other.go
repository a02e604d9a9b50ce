//go:build !linux

package bench

import "time"

// fineSleeper is time.Sleep off Linux.
type fineSleeper struct{}

func startFineSleep() *fineSleeper           { return &fineSleeper{} }
func (s *fineSleeper) sleep(d time.Duration) { time.Sleep(d) }
func (s *fineSleeper) stop()                 {}
