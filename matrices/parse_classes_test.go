package matrices

import "testing"

func TestClassBounds(t *testing.T) {
	const base = "name: t\nseed: 1\nengine: {kind: sim}\nconfigs: {plain: {}}\nrates: [1]\nshapes: [{input: 16, output: 4}]\nmeasure: {min_completed: 10}\n"
	m, err := Parse("m.yaml", []byte(base+"class_bounds: [1000, 8000, 30000]\n"))
	if err != nil || m.ClassBounds != [3]int{1000, 8000, 30000} {
		t.Fatalf("bounds %v, %v", m, err)
	}
	plain, err := Parse("m.yaml", []byte(base))
	if err != nil || plain.ClassBounds != [3]int{} || plain.Hash != m.Hash {
		t.Errorf("without class_bounds: %v %v; the bounds are analysis only, so the hash must not change (%s vs %s)", plain.ClassBounds, err, plain.Hash, m.Hash)
	}
	for _, bad := range []string{"[1, 2]", "[0, 2, 3]", "[1, 2, x]", "5"} {
		if _, err := Parse("m.yaml", []byte(base+"class_bounds: "+bad+"\n")); err == nil {
			t.Errorf("class_bounds %s accepted", bad)
		}
	}
}
