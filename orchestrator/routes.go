package orchestrator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/mbench/mbench/internal/durable"
	"github.com/mbench/mbench/matrices"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
)

// A run behind `mbench router` keeps the router's account of it: before the
// load the router's log is cleared (DELETE /routes); after it, its entries
// go to routing.jsonl and its /breakdown to breakdown.json in the run
// directory. A router that serves neither (another proxy) is left alone.

var routesClient = &http.Client{Timeout: 10 * time.Second}

// resetRoutes clears the router's routing log, when there is a router.
func (s *runner) resetRoutes(ctx context.Context, es *engineSet) {
	if es.router == nil {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, es.router.url+"/routes", nil)
	if err != nil {
		return
	}
	if resp, err := routesClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// saveRoutes writes the router's routing log and breakdown into dir and
// returns each request's new-token estimate by request id (nil without a
// routing log).
func (s *runner) saveRoutes(ctx context.Context, es *engineSet, dir string) (map[int]int, error) {
	if es.router == nil {
		return nil, nil
	}
	routes, ok := getRouter(ctx, es.router.url+"/routes")
	if !ok {
		return nil, nil
	}
	if err := durable.WriteFile(filepath.Join(dir, "routing.jsonl"), routes, 0o644); err != nil {
		return nil, fmt.Errorf("write routing.jsonl: %w", err)
	}
	if bd, ok := getRouter(ctx, es.router.url+"/breakdown"); ok {
		if err := durable.WriteFile(filepath.Join(dir, "breakdown.json"), bd, 0o644); err != nil {
			return nil, fmt.Errorf("write breakdown.json: %w", err)
		}
	}
	newTok := map[int]int{}
	sc := bufio.NewScanner(bytes.NewReader(routes))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var e struct {
			ID        string `json:"id"`
			NewTokens int    `json:"new_tokens_est"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			s.logf("warning: routing.jsonl:%d: %v (line skipped)", line, err)
			continue
		}
		if id, err := strconv.Atoi(e.ID); err == nil {
			newTok[id] = e.NewTokens
		}
	}
	return newTok, nil
}

// classTokens says what a run's request classes are measured on
// (class_basis) and each request's figure by id: the ideal cache's new
// tokens of a trace shape (config-independent: the default), the router's
// estimate (routing-dependent, asked for), or the input tokens (nil).
func (s *runner) classTokens(cell matrices.Cell, routerNewTok map[int]int) (results.ClassBasis, map[int]int) {
	basis := s.m.ClassBasis
	if basis == matrices.ClassBasisAuto || basis == "" {
		basis = matrices.ClassBasisInput
		if cell.Spec.Trace != nil {
			basis = matrices.ClassBasisIdeal
		}
	}
	switch basis {
	case matrices.ClassBasisRouterTokens:
		return results.ClassByRouterNewTokens, routerNewTok
	case matrices.ClassBasisIdeal:
		t := cell.Spec.Trace
		if t == nil {
			return results.ClassByIdealNewTokens, nil // every request falls back to its input tokens
		}
		reqs, err := openloop.LoadTrace(t.Path)
		if err == nil {
			var ideal []int
			if ideal, err = openloop.IdealNewTokens(reqs, *t); err == nil {
				return results.ClassByIdealNewTokens, maps.Collect(slices.All(ideal)) // by request id
			}
		}
		s.logf("warning: request classes by ideal new tokens: %v (classed by input tokens)", err)
		return results.ClassByIdealNewTokens, nil
	}
	return results.ClassByInputTokens, nil
}

// getRouter GETs url and returns the body when it answers 200.
func getRouter(ctx context.Context, url string) ([]byte, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false
	}
	resp, err := routesClient.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	return b, err == nil && resp.StatusCode == http.StatusOK
}
