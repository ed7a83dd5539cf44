package matrices

import "go.yaml.in/yaml/v3"

// classBounds decodes class_bounds: the request-class bounds in new prompt
// tokens (WARM below the first, MEDIUM below the second, HEAVY below the
// third, HEAVY+ above), three positive increasing integers. They shape the
// analysis only, so they are not part of the resolved matrix or its hash.
func (d *decoder) classBounds(v *yaml.Node, m *Matrix) {
	if v == nil {
		return
	}
	const valid = "three increasing token counts such as [5000, 20000, 50000]"
	es, ps, ok := d.list(v, "class_bounds")
	if !ok {
		return
	}
	if len(es) != 3 {
		d.add(v.Line, "class_bounds", valid, "%d bounds given", len(es))
		return
	}
	var b [3]int
	for i, e := range es {
		n, ok := d.integer(e, ps[i], 1, 1<<31)
		if !ok {
			return
		}
		if i > 0 && int(n) <= b[i-1] {
			d.add(e.Line, ps[i], valid, "bound %d is not above the one before (%d)", n, b[i-1])
			return
		}
		b[i] = int(n)
	}
	m.ClassBounds = b
}

// defaultClassBounds are the bounds without class_bounds: 5k, 20k and 50k
// tokens (as results.DefaultClassBounds and the router's default).
var defaultClassBounds = [3]int{5000, 20000, 50000}

// Class bases of class_basis (results.ClassBasis names the same ones).
const (
	// ClassBasisAuto: ideal_new_tokens for a trace shape (its hash ids
	// say what an ideal cache holds), input_tokens otherwise.
	ClassBasisAuto         = "auto"
	ClassBasisIdeal        = "ideal_new_tokens"
	ClassBasisInput        = "input_tokens"
	ClassBasisRouterTokens = "router_new_tokens"
)

// classBasis decodes class_basis; like class_bounds it shapes the analysis
// only and is not part of the hash.
func (d *decoder) classBasis(v *yaml.Node, m *Matrix) {
	m.ClassBasis = ClassBasisAuto
	if v == nil {
		return
	}
	m.ClassBasis, _ = d.enum(v, "class_basis", ClassBasisAuto, ClassBasisIdeal, ClassBasisInput, ClassBasisRouterTokens)
}
