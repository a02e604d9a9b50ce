//go:build !linux

package launch

import "syscall"

func procAttr() *syscall.SysProcAttr { return nil }
