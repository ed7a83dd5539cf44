package openloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// TokenRange is the half-open range [Min, Max) of token ids that prompts
// of token ids are drawn from. Every id in it must be a token of the
// engine's vocabulary, or the engine refuses the prompt (llama.cpp's
// llama-server answers HTTP 400 "Prompt contains invalid tokens" for an id
// ≥ its n_vocab). The zero TokenRange means "not set".
type TokenRange struct {
	Min, Max int
}

// DefaultTokenRange is the range used when neither the configuration nor
// the engine says otherwise: ids that are ordinary tokens in the
// vocabularies of common models (Llama-2's 32,000 and larger), past their
// special and byte tokens.
var DefaultTokenRange = TokenRange{Min: TokenIDMin, Max: TokenIDMax}

// minTokenSpan is the fewest ids a learned range may hold: fewer would make
// prompts so repetitive that prefix caching sees spurious hits.
const minTokenSpan = 1000

// IsZero reports whether the range is unset.
func (t TokenRange) IsZero() bool { return t == TokenRange{} }

// Validate reports a range that cannot be drawn from.
func (t TokenRange) Validate() error {
	if t.Min < 0 || t.Max <= t.Min || t.Max > 1<<31-1 {
		return namedErr("token_ids", fmt.Sprintf("token ids [%d, %d)", t.Min, t.Max), "", "need 0 ≤ min < max")
	}
	return nil
}

func (t TokenRange) String() string { return fmt.Sprintf("[%d, %d)", t.Min, t.Max) }

// ParseTokenRange parses "MIN:MAX", the half-open range [MIN, MAX).
func ParseTokenRange(s string) (TokenRange, error) {
	lo, hi, ok := strings.Cut(s, ":")
	a, errA := strconv.Atoi(strings.TrimSpace(lo))
	b, errB := strconv.Atoi(strings.TrimSpace(hi))
	if !ok || errA != nil || errB != nil {
		return TokenRange{}, fmt.Errorf("%q: want MIN:MAX, such as 1000:20000", s)
	}
	t := TokenRange{Min: a, Max: b}
	return t, t.Validate()
}

// orDefault is t, or DefaultTokenRange when t is unset.
func (t TokenRange) orDefault() TokenRange {
	if t.IsZero() {
		return DefaultTokenRange
	}
	return t
}

// TokenSource says where a run's token range came from.
type TokenSource string

// Token range sources, as written in Result.TokenSource.
const (
	TokensConfigured TokenSource = "configured" // Config.TokenIDs, checked against the engine's vocabulary when it says
	TokensEngine     TokenSource = "engine"     // learned from the engine's vocabulary size
	TokensDefault    TokenSource = "default"    // DefaultTokenRange; the engine does not say its vocabulary size
)

// ErrTokenRange marks a run that did not start because its token ids do
// not fit the engine's vocabulary.
var ErrTokenRange = errors.New("token ids outside the engine's vocabulary")

// ServedModel is what GET /v1/models says about the first model it lists.
type ServedModel struct {
	ID    string
	Vocab int // vocabulary size (llama.cpp: data[0].meta.n_vocab); 0 = not said
}

// FetchServedModel asks base/v1/models for the served models (sending
// headers, the API key among them) and returns the first one: its id and, where the engine says it (llama.cpp's
// llama-server, tools/server/server-context.cpp get_res_model_info at
// 80fb11a: "meta": {"n_vocab": …}), its vocabulary size. vLLM, SGLang and
// TGI list no vocabulary size there.
func FetchServedModel(ctx context.Context, hc *http.Client, base string, headers [][2]string) (ServedModel, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return ServedModel{}, fmt.Errorf("model lookup: %w", err)
	}
	for _, h := range headers {
		req.Header.Set(h[0], h[1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return ServedModel{}, fmt.Errorf("model lookup: GET %s/v1/models: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return ServedModel{}, fmt.Errorf("model lookup: GET %s/v1/models: %w", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		return ServedModel{}, fmt.Errorf("model lookup: GET %s/v1/models: HTTP %d: %.200s", base, resp.StatusCode, body)
	}
	var list struct {
		Data []struct {
			ID   string `json:"id"`
			Meta *struct {
				NVocab int `json:"n_vocab"`
			} `json:"meta"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return ServedModel{}, fmt.Errorf("model lookup: GET %s/v1/models: %w", base, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return ServedModel{}, fmt.Errorf("model lookup: GET %s/v1/models: no model listed", base)
	}
	m := ServedModel{ID: list.Data[0].ID}
	if meta := list.Data[0].Meta; meta != nil && meta.NVocab > 0 {
		m.Vocab = meta.NVocab
	}
	return m, nil
}

// ChooseTokens is the token range of a run: the configured one, checked
// against the engine's vocabulary size when that is known (vocab > 0);
// else DefaultTokenRange cut to the vocabulary. A range that does not fit
// is ErrTokenRange saying what to set instead; where names the model and
// the engine for it.
func ChooseTokens(configured TokenRange, vocab int, where string) (TokenRange, TokenSource, error) {
	if !configured.IsZero() {
		if err := configured.Validate(); err != nil {
			return TokenRange{}, "", err
		}
		if vocab > 0 && configured.Max > vocab {
			return TokenRange{}, "", fmt.Errorf("%w: token ids %v, but %s has %d tokens (ids 0-%d); set token ids below %d",
				ErrTokenRange, configured, where, vocab, vocab-1, vocab)
		}
		return configured, TokensConfigured, nil
	}
	if vocab <= 0 {
		return DefaultTokenRange, TokensDefault, nil
	}
	t := DefaultTokenRange
	t.Max = min(t.Max, vocab)
	if t.Max-t.Min < minTokenSpan {
		return TokenRange{}, "", fmt.Errorf("%w: %s has only %d tokens, too few for token ids from %d with %d to draw from; set the token ids (engine.token_ids in the matrix, --token-ids for mbench load) to a range of ordinary tokens of its vocabulary",
			ErrTokenRange, where, vocab, t.Min, minTokenSpan)
	}
	return t, TokensEngine, nil
}
