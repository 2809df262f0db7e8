//go:build !linux

package main

import "syscall"

// bindAddressNoPort is a Linux socket option; elsewhere the kernel's default applies.
func bindAddressNoPort(_, _ string, _ syscall.RawConn) error { return nil }
