package matrices

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// CheckSimFlags checks the sim maps (engine.sim and every config's sim)
// against the flags the simulated engine knows (known: their command-line
// names, step-base-us): a key it does not know would stop every launch of
// the engine, so it is refused here with its line and the nearest name.
func (m *Matrix) CheckSimFlags(known []string) error {
	if m.Engine.Kind != EngineSim {
		return nil
	}
	var valid []string // as the matrix spells them
	for _, k := range known {
		if !slices.Contains(reservedSimFlags, k) {
			valid = append(valid, strings.ReplaceAll(k, "-", "_"))
		}
	}
	var es Errors
	check := func(path string, flags map[string]string) {
		for _, flag := range slices.Sorted(maps.Keys(flags)) {
			if slices.Contains(known, flag) {
				continue
			}
			key := strings.ReplaceAll(flag, "-", "_")
			field := path + "." + key
			if m.lines[field] == 0 {
				field = path + "." + flag
			}
			es = append(es, m.errAt(field, "unknown sim flag"+suggest(key, valid), strings.Join(valid, ", ")))
		}
	}
	check("engine.sim", m.Engine.Sim)
	for _, name := range m.ConfigOrder {
		check("configs."+name+".sim", m.Configs[name].Sim)
	}
	if len(es) == 0 {
		return nil
	}
	return es.sorted()
}

// ModelFile is engine.model when it names a file or directory rather than
// a model id: always for llama-server (-m FILE), and for any kind when it
// is a path (/…, ./…, ../…, ~/…). ok is false for a model id
// (meta-llama/Llama-3.1-8B) and for the simulated engine.
func (m *Matrix) ModelFile() (path string, ok bool) {
	mod := m.Engine.Model
	switch {
	case mod == "" || m.Engine.Kind == EngineSim:
		return "", false
	case m.Engine.Kind == EngineLlamaCpp, filepath.IsAbs(mod), strings.HasPrefix(mod, "./"), strings.HasPrefix(mod, "../"), strings.HasPrefix(mod, "~/"):
		return mod, true
	}
	return "", false
}

// ErrorAt is a problem with field, at its line in the matrix file.
func (m *Matrix) ErrorAt(field, msg string) *Error { return m.errAt(field, msg, "") }

// Line is the line of field in the matrix file (0: not in the file).
func (m *Matrix) Line(field string) int { return m.lines[field] }

// Problems sorts problems found after parsing (by line) into the Errors
// that Load returns: nil when there are none.
func Problems(es []*Error) error {
	if len(es) == 0 {
		return nil
	}
	return Errors(es).sorted()
}
