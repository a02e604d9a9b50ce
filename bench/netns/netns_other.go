//go:build !linux

package netns

import "errors"

// Do runs fn; namespaces other than "" exist on Linux only.
func Do(ns string, fn func() error) error {
	if ns != "" {
		return errors.New("netns: network namespaces are Linux only")
	}
	return fn()
}

// Exec is nothing off Linux.
func Exec(ns string) []string { return nil }
