package matrices

import (
	"fmt"
	"strings"
)

// routerWarnings checks the configs whose router is `mbench router` for
// settings the matrix has and the router command does not pass on.
func (m *Matrix) routerWarnings() []Warning {
	var ws []Warning
	for _, name := range m.ConfigOrder {
		c := m.Configs[name]
		if c.Router == nil || c.SameAs != "" || !isMbenchRouter(c.Router.Command) {
			continue
		}
		field := "configs." + name + ".router.command"
		line := m.lines[field]
		if m.ClassBounds != [3]int{} && !strings.Contains(c.Router.Command, "--class-bounds") {
			ws = append(ws, Warning{Line: line, Field: field,
				Msg: fmt.Sprintf("class_bounds is %v but the router classifies by its default 5000,20000,50000 (routing.jsonl, breakdown.json): add --class-bounds {{.ClassBounds}}", m.ClassBounds)})
		}
	}
	return ws
}

// isMbenchRouter reports whether a router command runs `mbench router`.
func isMbenchRouter(command string) bool {
	f := strings.Fields(command)
	for i := 0; i+1 < len(f); i++ {
		if f[i+1] == "router" && (f[i] == "{{.Self}}" || strings.HasSuffix(f[i], "mbench")) {
			return true
		}
	}
	return false
}
