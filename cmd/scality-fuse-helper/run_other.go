//go:build !linux

package main

import (
	"errors"
	"time"
)

func run(string, bool, bool, time.Duration) error {
	return errors.New("scality-fuse-helper runs on Linux only")
}

func bindTwice(string, string, bool) error {
	return errors.New("scality-fuse-helper runs on Linux only")
}

func enterManagerNamespace() error {
	return errors.New("scality-fuse-helper runs on Linux only")
}

func unmountStale(string) error {
	return errors.New("scality-fuse-helper runs on Linux only")
}
