package matrices

import (
	"github.com/mbench/mbench/openloop"
	"go.yaml.in/yaml/v3"
)

// The load generator's options beyond rates and shapes: the endpoint, the
// closed-loop and ramp arrivals, and dataset shapes. Each enters the cell ids
// and the resolved matrix only when used, so matrices that do not use them
// keep their hashes (and their sweeps stay resumable).

// endpoint decodes endpoint: completions | chat (default completions).
func (d *decoder) endpoint(v *yaml.Node, m *Matrix) {
	m.Endpoint = openloop.EndpointCompletions
	if v == nil {
		return
	}
	names := make([]string, len(openloop.Endpoints))
	for i, e := range openloop.Endpoints {
		names[i] = string(e)
	}
	if s, ok := d.enum(v, "endpoint", names...); ok {
		m.Endpoint = openloop.Endpoint(s)
	}
}

// loadgenSpec adds the load generator's options in use to spec, a cell spec
// or the resolved matrix.
func (m *Matrix) loadgenSpec(spec map[string]any) {
	if m.Endpoint != "" && m.Endpoint != openloop.EndpointCompletions {
		spec["endpoint"] = string(m.Endpoint)
	}
}
