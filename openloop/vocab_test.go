package openloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestChooseTokens(t *testing.T) {
	for _, tc := range []struct {
		configured TokenRange
		vocab      int
		want       TokenRange
		src        TokenSource
		err        string
	}{
		{vocab: 0, want: DefaultTokenRange, src: TokensDefault},
		{vocab: 32000, want: DefaultTokenRange, src: TokensEngine},
		{vocab: 128256, want: DefaultTokenRange, src: TokensEngine},
		{vocab: 20000, want: TokenRange{1000, 20000}, src: TokensEngine},
		{vocab: 2000, want: TokenRange{1000, 2000}, src: TokensEngine},
		{vocab: 1999, err: "only 1999 tokens"},
		{vocab: 300, err: "only 300 tokens"},
		{configured: TokenRange{300, 500}, vocab: 512, want: TokenRange{300, 500}, src: TokensConfigured},
		{configured: TokenRange{300, 513}, vocab: 512, err: "has 512 tokens (ids 0-511); set token ids below 512"},
		{configured: TokenRange{5, 90000}, want: TokenRange{5, 90000}, src: TokensConfigured},
		{configured: TokenRange{10, 10}, err: "need 0 ≤ min < max"},
		{configured: TokenRange{-1, 10}, err: "need 0 ≤ min < max"},
	} {
		got, src, err := ChooseTokens(tc.configured, tc.vocab, "the model m")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v vocab %d: err %v, want %q", tc.configured, tc.vocab, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want || src != tc.src {
			t.Errorf("%v vocab %d: %v %s %v, want %v %s", tc.configured, tc.vocab, got, src, err, tc.want, tc.src)
		}
	}
}

// TestDefaultTokensUnchanged: with the default range the prompts are the
// ids drawn before ranges existed (TokenIDMin + IntN(TokenIDMax −
// TokenIDMin)), so results of earlier sweeps stay comparable, and a set
// range is honoured by every kind of prompt.
func TestDefaultTokensUnchanged(t *testing.T) {
	s := Shape{Input: 300, Output: 4, Prefix: &Prefix{NumPrefixes: 3, PrefixTokens: 100}}
	g := promptGen{seed: 5, shape: s}
	for i := range 20 {
		toks, _, group := g.open(i, nil)
		want := []int32{}
		lr := streamRNG(5, saltLengths, uint64(i))
		gi := lr.IntN(3)
		if gi+1 != group {
			t.Fatalf("request %d: group %d, want %d", i, group, gi+1)
		}
		old := func(r *rand.Rand, n int) {
			for range n {
				want = append(want, int32(TokenIDMin+r.IntN(TokenIDMax-TokenIDMin)))
			}
		}
		old(streamRNG(5, saltPrefix, uint64(gi)), 100)
		old(streamRNG(5, saltTokens, uint64(i)), 200)
		if fmt.Sprint(toks) != fmt.Sprint(want) {
			t.Fatalf("request %d: prompt differs from the pre-range draw", i)
		}
	}
	r := TokenRange{Min: 400, Max: 410}
	g = promptGen{seed: 5, shape: Shape{Input: 64, Output: 4, CacheFill: &CacheFill{Prefixes: 1, PrefixTokens: 64}}, tokens: r}
	seen := map[int32]bool{}
	check := func(what string, toks []int32) {
		for _, id := range toks {
			if int(id) < r.Min || int(id) >= r.Max {
				t.Fatalf("%s: id %d outside %v", what, id, r)
			}
			seen[id] = true
		}
	}
	for i := range 10 {
		toks, _, _ := g.open(i, nil)
		check("open", toks)
		check("fill", g.fill(i, nil))
		check("trace", g.trace(i, &TraceRequest{InputLength: 700, HashIDs: []int64{int64(i)}}, nil))
	}
	if len(seen) != r.Max-r.Min {
		t.Errorf("drew %d distinct ids of the %d in %v", len(seen), r.Max-r.Min, r)
	}
}

// TestRunLearnsVocab: a run that looks its model up takes the vocabulary
// size the engine lists (llama-server's /v1/models meta.n_vocab) and draws
// every prompt id below it; one whose set range does not fit fails at
// first contact with ErrTokenRange, sending nothing.
func TestRunLearnsVocab(t *testing.T) {
	var maxID, posts int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, `{"object":"list","data":[{"id":"tiny.gguf","object":"model","owned_by":"llamacpp","meta":{"vocab_type":1,"n_vocab":5000,"n_ctx":2048}}]}`)
			return
		}
		posts++
		var body struct {
			Prompt []int `json:"prompt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		for _, id := range body.Prompt {
			maxID = max(maxID, id)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\" a\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":64,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	cfg := Config{Targets: []string{srv.URL}, Rate: 50, Shape: Shape{Input: 64, Output: 1}, Requests: 20}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.TokenIDs != (TokenRange{1000, 5000}) || res.TokenSource != TokensEngine || res.Model != "tiny.gguf" {
		t.Errorf("result tokens %v from %s, model %q; want [1000, 5000) from the engine", res.TokenIDs, res.TokenSource, res.Model)
	}
	if maxID < 4000 || maxID >= 5000 {
		t.Errorf("largest id sent %d, want in [4000, 5000)", maxID)
	}
	cfg.TokenIDs, posts = TokenRange{Min: 1000, Max: 31000}, 0
	_, err = Run(context.Background(), cfg)
	if !errors.Is(err, ErrTokenRange) || !strings.Contains(err.Error(), "has 5000 tokens") || posts != 0 {
		t.Errorf("set range [1000, 31000) against 5000 tokens: %v after %d requests; want ErrTokenRange before any", err, posts)
	}
	cfg.TokenIDs, cfg.Vocab, cfg.Model = TokenRange{}, 3000, "m"
	if res, err = Run(context.Background(), cfg); err != nil || res.TokenIDs != (TokenRange{1000, 3000}) {
		t.Errorf("known vocab 3000: %v %v, want [1000, 3000)", res.TokenIDs, err)
	}
}

func TestParseTokenRange(t *testing.T) {
	for in, want := range map[string]TokenRange{"1000:20000": {1000, 20000}, " 0 : 5 ": {0, 5}} {
		if got, err := ParseTokenRange(in); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "5", "5:", ":5", "a:b", "5:5", "9:3", "-1:4", "1:99999999999"} {
		if _, err := ParseTokenRange(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

func FuzzParseTokenRange(f *testing.F) {
	for _, s := range []string{"1000:20000", "0:1", "5:5", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseTokenRange(s)
		if err == nil && (r.Validate() != nil || r.Min < 0 || r.Max <= r.Min) {
			t.Fatalf("%q parsed to an invalid %v", s, r)
		}
	})
}
