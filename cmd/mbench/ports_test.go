package main

import (
	"testing"

	"github.com/mbench/mbench/internal/porttest"
)

// freePortBase reserves a block of porttest.Size free ports below the
// ephemeral port range for engine.port in a test matrix (porttest.Base):
// a test sweep's instances and router count up from it.
func freePortBase(t testing.TB) string { return porttest.Base(t) }
