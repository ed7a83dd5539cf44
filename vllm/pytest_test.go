package vllm

import (
	"os"
	"os/exec"
	"strings"
	"testing"
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
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest output:\n%s", out)
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
	if !strings.Contains(string(out), "passed") {
		t.Fatalf("pytest ran no test")
	}
}
