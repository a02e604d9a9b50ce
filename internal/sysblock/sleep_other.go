//go:build !linux

package sysblock

import "time"

func sleep(d time.Duration) { time.Sleep(d) }
