//go:build !linux

package main

import (
	"errors"

	"github.com/tern-gw/tern/bench"
	"github.com/tern-gw/tern/bench/launch"
)

func (c *common) setupNetns(*launch.Launcher) (func(), error) {
	return nil, errors.New("-netns: network namespaces are Linux only")
}

func watchOffload(*launch.Launcher, bench.Target)   {}
func watchListeners(*launch.Launcher, bench.Target) {}
