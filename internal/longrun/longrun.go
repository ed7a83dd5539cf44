// Package longrun tells a plain `go test ./...` from CI's long run
// (MBENCH_LONG=1, which .ci/run sets), for tests laid out differently in
// the two: the long run adds the long validation sweeps, which measure the
// machine's noise, and keeps every other test's neighbours as they were
// when those sweeps were checked; a plain run, which must stay within
// minutes on two cores, runs tests that wait rather than compute side by
// side.
package longrun

import "os"

// On reports whether this is the long run (MBENCH_LONG=1).
func On() bool { return os.Getenv("MBENCH_LONG") == "1" }

// Paralleler is the part of *testing.T that Parallel uses.
type Paralleler interface{ Parallel() }

// Parallel marks t parallel in a plain run; in the long run t stays
// serial, as CI has always run it.
func Parallel(t Paralleler) {
	if !On() {
		t.Parallel()
	}
}
