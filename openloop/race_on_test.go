//go:build race

package openloop

// raceEnabled: the race detector slows everything ~10×; timing tests only log.
const raceEnabled = true
