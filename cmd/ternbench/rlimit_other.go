//go:build !linux

package main

// raiseNoFile is a no-op where ternbench does not manage resource limits.
func raiseNoFile() {}
