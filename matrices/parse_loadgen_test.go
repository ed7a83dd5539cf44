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
	for _, tc := range []struct{ extra, want string }{
		{"endpoint: chats\n", `x.yaml:8: endpoint: unknown value "chats"`},
	} {
		_, err := Parse("x.yaml", []byte(minimalSim+tc.extra))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.extra, err, tc.want)
		}
	}
}
