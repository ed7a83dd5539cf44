//go:build !(linux && (amd64 || arm64))

package openloop

import (
	"errors"
	"time"
)

type timerfd struct{}

func newTimerfd() (*timerfd, error) { return nil, errors.New("timerfd not available") }

func (t *timerfd) sleep(time.Duration) error { return errors.New("timerfd not available") }

func (t *timerfd) close() {}
