//go:build !(linux && (amd64 || arm64))

package openloop

import (
	"errors"
	"time"
)

// haveTimerfd is false: the pacer falls back to its spin mode.
const haveTimerfd = false

type timerfd struct{}

func newTimerfd() (*timerfd, error) { return nil, errors.New("timerfd not available") }

func (t *timerfd) sleep(time.Duration) error { return errors.New("timerfd not available") }

func (t *timerfd) close() {}
