package vllm

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/longrun"
)

// In a plain run the suite runs as three pytests side by side (about half
// its wall time on two cores): the files that measure the plugin's cost
// (paired chunks of engine steps), the H200 proof script's run on the fake
// GPU, and the rest; CI's long run keeps the whole suite in one pytest, as
// it always ran.
var (
	timedFiles = []string{"tests/test_overhead.py"}
	proofFiles = []string{"tests/test_h200_script.py"}
)

// TestPytestSuite runs vllm/tests with Debian's python3-pytest. Without
// pytest it skips, unless MBENCH_REQUIRE_PYTEST=1 (CI) makes that a failure.
func TestPytestSuite(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = "python3"
	}
	if err := exec.Command(py, "-c", "import pytest").Run(); err != nil {
		if os.Getenv("MBENCH_REQUIRE_PYTEST") == "1" {
			t.Fatalf("pytest is required (MBENCH_REQUIRE_PYTEST=1) but %s cannot import it: %v", py, err)
		}
		t.Skipf("pytest not available for %s (apt-get install python3-pytest)", py)
	}
	if longrun.On() {
		runPytest(t, py, "tests")
		return
	}
	rest := []string{"tests"}
	for _, f := range append(slices.Clone(timedFiles), proofFiles...) {
		rest = append(rest, "--ignore="+f)
	}
	// Every file runs once: the timed and proof ones in their groups, the
	// others (whatever files the suite gains) in "rest".
	t.Run("timed", func(t *testing.T) { t.Parallel(); runPytest(t, py, timedFiles...) })
	t.Run("proof", func(t *testing.T) { t.Parallel(); runPytest(t, py, proofFiles...) })
	t.Run("rest", func(t *testing.T) { t.Parallel(); runPytest(t, py, rest...) })
}

// runPytest runs pytest on args in vllm/ and fails t unless it passed tests.
func runPytest(t *testing.T, py string, args ...string) {
	t.Helper()
	cmd := exec.Command(py, append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider"}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest %s output:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("pytest %s failed: %v", strings.Join(args, " "), err)
	}
	if !strings.Contains(string(out), "passed") {
		t.Fatalf("pytest %s ran no test", strings.Join(args, " "))
	}
}
