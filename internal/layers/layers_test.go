package layers

import (
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/mbench/mbench/"

// layer is each package's layer, lowest first: a package may import only
// packages of a lower layer (docs/development.md, "Packages").
var layer = map[string]int{
	// Nothing of ours below them.
	"stats": 0, "shquote": 0, "internal/clock": 0, "internal/durable": 0, "internal/userfile": 0,
	"internal/cpupin": 0, "internal/conformance": 0, "internal/porttest": 0, "internal/hangguard": 0,
	"internal/longrun": 0, "internal/chromiumtest": 0, "internal/netnstest": 0, "internal/sshdtest": 0,
	"internal/layers": 0, "llamacpp": 0, "cmd/tinyllama": 1, "vllm": 0, "router": 0, "simengine": 0,
	"internal/simtest": 1,
	// The load generator and its records, then what reads them.
	"openloop/stub": 1, "openloop": 2,
	"probes":  3,
	"engines": 4, "results": 4,
	"results/sweepdir": 5, "orchestrator/hosts": 5,
	"results/report": 6, "matrices": 6,
	"orchestrator/internal/plan": 7,
	"orchestrator":               8,
	"cmd/mbench":                 9,
}

// TestDependenciesPointOneWay reads the imports of every package's non-test
// files and fails on an import of a package of the same or a higher layer,
// and on a package the table does not place.
func TestDependenciesPointOneWay(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if imports[pkg] == nil { // a package even with no imports of ours
			imports[pkg] = map[string]bool{}
		}
		for _, s := range f.Imports {
			p, _ := strconv.Unquote(s.Path.Value)
			if dep, ok := strings.CutPrefix(p, module); ok {
				imports[pkg][dep] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 20 {
		t.Fatalf("found %d packages under %s; the walk missed the tree", len(imports), root)
	}
	for _, pkg := range slices.Sorted(maps.Keys(imports)) {
		l, ok := layer[pkg]
		if !ok {
			t.Errorf("package %s has no layer: place it in the table (and in docs/development.md)", pkg)
			continue
		}
		for _, dep := range slices.Sorted(maps.Keys(imports[pkg])) {
			if dl, ok := layer[dep]; !ok || dl >= l {
				t.Errorf("%s (layer %d) imports %s (layer %d): dependencies point down only", pkg, l, dep, dl)
			}
		}
	}
}
