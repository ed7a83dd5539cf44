package orchestrator

import (
	"testing"

	"github.com/mbench/mbench/internal/conformance"
)

// TestBootstrapRegistered: the sweep's wait on a Mooncake bootstrap server
// holds vLLM 0.18.1's answers as the router does: {} before a worker
// registers is not ready, the DP-rank-keyed entry with its engine id is;
// anything else (a vLLM API port's 404 body, another shape) is not.
func TestBootstrapRegistered(t *testing.T) {
	for _, c := range []struct {
		name string
		body []byte
		want bool
	}{
		{"unregistered", conformance.MooncakeBody(conformance.MooncakeQueryUnregistered, conformance.Mooncake{}), false},
		{"registered", conformance.MooncakeBody(conformance.MooncakeQueryRegistered, conformance.Mooncake{}), true},
		{"404 body", []byte(`{"detail":"Not Found"}`), false},
		{"no engine id", []byte(`{"0":{"worker_addr":{"0":{"0":"tcp://h:1"}}}}`), false},
		{"not json", []byte(`ok`), false},
		{"empty", nil, false},
	} {
		if got := bootstrapRegistered(c.body); got != c.want {
			t.Errorf("%s: bootstrapRegistered(%s) = %v, want %v", c.name, c.body, got, c.want)
		}
	}
}
