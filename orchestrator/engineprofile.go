package orchestrator

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/mbench/mbench/engines"
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/openloop"
)

// What differs between engine kinds (package engines) where the sweep
// needs it: readiness, metric names, version, vocabulary, step log.

// profileOf is the profile of m's engine kind.
func profileOf(m *matrices.Matrix) engines.Profile { return engines.Of(engines.Kind(m.Engine.Kind)) }

// profile is the engine kind's profile of the runs.
func (s *runner) profile() engines.Profile { return profileOf(s.m) }

// learnVocab asks the first instance of a freshly launched set its
// vocabulary size, where the kind says it, and checks the matrix's prompt
// token ids against it, so that a matrix whose ids the engine would refuse
// stops the sweep at first contact with what to set, rather than failing
// every request with HTTP 400.
func (s *runner) learnVocab(ctx context.Context, es *engineSet) error {
	p := s.profile()
	if p.Vocab.IsZero() || len(es.procs) == 0 {
		return nil
	}
	first := es.procs[0]
	c := &http.Client{Timeout: 10 * time.Second}
	vocab, err := p.VocabOf(ctx, c, first.url)
	if err != nil {
		return fmt.Errorf("%s on host %s: %w", first.name, first.hostName, err)
	}
	where := fmt.Sprintf("the model %s of %s on host %s (%s)", s.m.Engine.Model, first.name, first.hostName, p.Vocab)
	if _, _, err := openloop.ChooseTokens(s.m.Engine.TokenIDs, vocab, where); err != nil {
		return fmt.Errorf("%w (engine.token_ids in %s)", err, s.m.File)
	}
	es.vocab = vocab
	return nil
}
