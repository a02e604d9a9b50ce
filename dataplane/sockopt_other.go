//go:build !linux

package dataplane

// reusePortSupported: off Linux a listener gets one socket.
const reusePortSupported = false
