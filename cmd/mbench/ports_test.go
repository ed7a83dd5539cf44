package main

import (
	"testing"

	"github.com/mbench/mbench/internal/porttest"
)

// portBlock is how many consecutive ports a test sweep may use from its
// engine.port on (instances and router count up from it).
const portBlock = porttest.Size

// freePortBase reserves a block of portBlock free ports below the
// ephemeral port range for engine.port in a test matrix (porttest.Base).
func freePortBase(t testing.TB) string { return porttest.Base(t) }
