package matrices

import (
	"strings"
	"testing"

	"github.com/mbench/mbench/openloop"
)

// TestLoadgenOptionsUnusedKeepHashes: a matrix that does not use the load
// generator's issue-22 options, or sets them to their defaults, keeps its
// hash and cell ids.
func TestLoadgenOptionsUnusedKeepHashes(t *testing.T) {
	plain := mustParse(t, "x.yaml", minimalSim)
	explicit := mustParse(t, "x.yaml", minimalSim+"endpoint: completions\n")
	chat := mustParse(t, "x.yaml", minimalSim+"endpoint: chat\n")
	if plain.Hash != explicit.Hash || plain.Cells()[0].ID != explicit.Cells()[0].ID {
		t.Errorf("endpoint: completions changed the hash")
	}
	if plain.Hash == chat.Hash || plain.Cells()[0].ID == chat.Cells()[0].ID {
		t.Errorf("endpoint: chat kept the hash")
	}
	if plain.Endpoint != openloop.EndpointCompletions || chat.Endpoint != openloop.EndpointChat {
		t.Errorf("endpoints %q %q", plain.Endpoint, chat.Endpoint)
	}
}

// TestLoadgenOptionErrors: each bad option is refused with its line and
// field.
func TestLoadgenOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		extra, want string
		dropRates   bool // remove rates: [1] (line 5; later lines move up one)
	}{
		{"endpoint: chats\n", `x.yaml:8: endpoint: unknown value "chats"`, false},
		{"arrival: {process: concurrency}\n", "x.yaml:7: arrival.in_flight: missing required key (process concurrency)", true},
		{"arrival: {process: concurrency}\n", "x.yaml:5: rates: a closed loop (process concurrency) has no rate", false},
		{"arrival: {process: concurrency, in_flight: 4}\n", "x.yaml:8: arrival.in_flight: a closed loop's in-flight levels replace rates (rates at line 5)", false},
		{"arrival: {in_flight: 4}\n", "x.yaml:7: arrival.in_flight: in_flight applies to process concurrency only", true},
		{"arrival: {process: concurrency, in_flight: [2, 2]}\n", "level 2 is listed twice", true},
		{"arrival: {process: concurrency, in_flight: 0}\n", "x.yaml:7: arrival.in_flight", true},
	} {
		src := minimalSim + tc.extra
		if tc.dropRates {
			src = strings.Replace(src, "rates: [1]\n", "", 1)
		}
		_, err := Parse("x.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.extra, err, tc.want)
		}
	}
}

// TestClosedLoopLevels: in_flight levels become the cells' rates, one cell
// per level and config; a matrix without rates or in_flight is refused.
func TestClosedLoopLevels(t *testing.T) {
	noRates := strings.Replace(minimalSim, "rates: [1]\n", "", 1)
	m := mustParse(t, "x.yaml", noRates+"arrival: {process: concurrency, in_flight: [2, 8]}\n")
	if len(m.Rates) != 2 || m.Rates[0] != 2 || m.Rates[1] != 8 || len(m.Cells()) != 4 || m.Arrival.Process != openloop.ArrivalConcurrency {
		t.Errorf("rates %v, %d cells, arrival %+v", m.Rates, len(m.Cells()), m.Arrival)
	}
	one := mustParse(t, "x.yaml", noRates+"arrival: {process: concurrency, in_flight: 3}\n")
	if len(one.Rates) != 1 || one.Rates[0] != 3 {
		t.Errorf("rates %v", one.Rates)
	}
	if _, err := Parse("x.yaml", []byte(noRates)); err == nil || !strings.Contains(err.Error(), "rates: missing required key") {
		t.Errorf("no rates: %v", err)
	}
}
