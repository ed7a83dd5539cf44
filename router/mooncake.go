package router

// vLLM's bootstrap Mooncake protocol, as its example proxy speaks it
// (examples/online_serving/disaggregated_serving/mooncake_connector/
// mooncake_connector_proxy.py at commit
// f1b4b2802cde3faa894510acb65beead29f57597; file:line below):
//
//   - Before serving, the proxy asks each producer's bootstrap server GET
//     /query until it answers, learning its engine id per DP rank
//     (:42-62), and answers 503 until then (:314-315).
//   - Per request: one fresh id (:319), sent as X-Request-Id on both legs
//     (:268, :294); the prefill leg {do_remote_decode: true} with
//     max_tokens 1 (:256-265) fired without waiting (:325-329), and at once
//     the decode leg {do_remote_prefill: true, remote_bootstrap_addr,
//     remote_engine_id, remote_dp_rank} (:297-303), streamed back.
//
// The router sends the decode leg's fields under the names of the other
// revisions of this protocol too, so one router speaks them all: the
// bootstrap_server_host and bootstrap_server_port of PR #31034's first
// version (commit 8fc582da949c433175f06b0a474cd57e7c88d077), and a
// transfer_id on both legs, which later revisions pair the legs by. Unlike
// the example it also sets ignore_eos on the prefill leg (a prefill whose
// one token is EOS finishes FINISHED_STOPPED, and the connector never sends
// its KV: mooncake_connector.py:426-429 at f1b4b280), and it does not leave
// a failed prefill unseen: when the prefill leg fails before the decode's
// first bytes, the decode leg is cancelled and the client gets the
// prefill's error.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// bootstrap is one producer's bootstrap server as the router knows it.
type bootstrap struct {
	host, port string
	addr       string // http://host:port

	mu       sync.Mutex
	ready    bool
	engineID string // of dp rank dpRank; "" when its /query is a 404 (8fc582da)
	dpRank   int
	lastErr  string
}

// setupBootstrap builds the bootstrap servers of the instances prefills may
// run on, for ProtocolMooncake.
func (s *Server) setupBootstrap() error {
	if s.opt.Protocol != ProtocolMooncake {
		return nil
	}
	var prefill []int
	switch {
	case s.r.prefill != nil:
		prefill = s.r.prefill
	case s.r.opt.Offload:
		prefill = s.r.serve
	default:
		return nil // nothing is split
	}
	ports := s.opt.BootstrapPorts
	if len(ports) == 0 {
		for range prefill {
			ports = append(ports, 8998)
		}
	}
	if len(ports) != len(prefill) {
		return fmt.Errorf("%d bootstrap ports for %d instances that prefill (give one per instance, in their order)", len(ports), len(prefill))
	}
	s.boot = map[int]*bootstrap{}
	for k, i := range prefill {
		u, err := url.Parse(s.r.URL(i))
		if err != nil {
			return fmt.Errorf("instance %s: %w", s.r.URL(i), err)
		}
		b := &bootstrap{host: u.Hostname(), port: strconv.Itoa(ports[k])}
		b.addr = "http://" + net.JoinHostPort(b.host, b.port)
		s.boot[i] = b
	}
	return nil
}

// discoverBootstrap asks every bootstrap server's GET /query, each until it
// answers, in the background until ctx ends.
func (s *Server) discoverBootstrap(ctx context.Context) {
	for _, i := range slices.Sorted(maps.Keys(s.boot)) {
		b := s.boot[i]
		go func() {
			wait := 50 * time.Millisecond
			for {
				if err := b.query(ctx, s.client); err == nil {
					fmt.Fprintf(s.opt.Messages, "router: bootstrap server %s of %s ready (engine %q, dp rank %d)\n", b.addr, s.r.URL(i), b.engineID, b.dpRank)
					return
				}
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				wait = min(2*wait, time.Second)
			}
		}()
	}
}

// query asks b's GET /query once. A 200 gives the engine of the lowest DP
// rank; a 404 is the first revision's server, which has no /query and needs
// no engine id; anything else (503 while workers register) is not ready.
func (b *bootstrap) query(ctx context.Context, c *http.Client) error {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(qctx, http.MethodGet, b.addr+"/query", nil)
	resp, err := c.Do(req)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.lastErr = err.Error()
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		b.ready = true
		return nil
	case http.StatusOK:
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		b.lastErr = fmt.Sprintf("GET /query: status %d: %s", resp.StatusCode, body)
		return errors.New(b.lastErr)
	}
	var engines map[string]map[string]json.RawMessage // engine id → dp rank → workers
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&engines); err != nil {
		b.lastErr = "GET /query: " + err.Error()
		return err
	}
	best := -1
	for id, ranks := range engines {
		for r := range ranks {
			if n, err := strconv.Atoi(r); err == nil && (best < 0 || n < best) {
				best, b.engineID = n, id
			}
		}
	}
	if best < 0 {
		b.lastErr = "GET /query: no engine registered"
		return errors.New(b.lastErr)
	}
	b.dpRank, b.ready = best, true
	return nil
}

// bootstrapReady is nil when every bootstrap server answered.
func (s *Server) bootstrapReady() error {
	for _, i := range slices.Sorted(maps.Keys(s.boot)) {
		b := s.boot[i]
		b.mu.Lock()
		ready, last := b.ready, b.lastErr
		b.mu.Unlock()
		if !ready {
			if last == "" {
				last = "not asked yet"
			}
			return fmt.Errorf("router: the bootstrap server %s of %s has not answered GET /query (%s)", b.addr, s.r.URL(i), last)
		}
	}
	return nil
}

// decodeParams are the decode leg's kv_transfer_params (see the file's
// comment).
func (b *bootstrap) decodeParams(transferID string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := `{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":` + jsonString(b.addr)
	if b.engineID != "" {
		p += `,"remote_engine_id":` + jsonString(b.engineID)
	}
	port, _ := strconv.Atoi(b.port)
	return p + `,"remote_dp_rank":` + strconv.Itoa(b.dpRank) + `,"transfer_id":` + jsonString(transferID) +
		`,"bootstrap_server_host":` + jsonString(b.host) + `,"bootstrap_server_port":` + strconv.Itoa(port) + `}`
}

// newTransferID is a fresh random id, as uuid.uuid4() formats one.
func newTransferID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// legResult is how a prefill leg ended.
type legResult struct {
	status int
	err    error
	ms     float64 // since the request's start
}

// serveMooncake runs a split request's two legs at once.
func (s *Server) serveMooncake(w http.ResponseWriter, req *http.Request, d *Decision, e *Entry, endpoint string, fields map[string]json.RawMessage, start time.Time) {
	id := newTransferID()
	e.TransferID = id
	fail := func(status int, err error) {
		e.Status, e.Error = status, err.Error()
		http.Error(w, e.Error, status)
	}
	pBody, err := prefillBody(fields, `{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":`+jsonString(id)+`}`)
	if err == nil {
		pBody, err = withField(pBody, "ignore_eos", "true")
	}
	if err != nil {
		fail(http.StatusInternalServerError, err)
		return
	}
	dFields := maps.Clone(fields)
	dFields["kv_transfer_params"] = json.RawMessage(s.boot[d.Prefill].decodeParams(id))
	dBody, err := json.Marshal(dFields)
	if err != nil {
		fail(http.StatusInternalServerError, err)
		return
	}
	h := req.Header.Clone()
	h.Set("X-Request-Id", id)
	ph := h.Clone()
	ph.Set("Accept", "application/json")
	ph.Set("X-data-parallel-rank", strconv.Itoa(s.boot[d.Prefill].dpRank))

	ctx := req.Context()
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	var firstByte atomic.Bool
	pres := make(chan legResult, 1)
	go func() {
		_, status, err := s.prefillLeg(ctx, s.r.URL(d.Prefill)+endpoint, ph, pBody)
		s.r.PrefillDone(d)
		if err != nil && !firstByte.Load() {
			dcancel() // its KV will never come: do not leave the decode waiting
		}
		pres <- legResult{status, err, msSince(start)}
	}()
	e.DecodeSentMs = msSince(start)
	resp, derr := s.forward(dctx, s.r.URL(d.Decode)+endpoint, http.MethodPost, h, dBody)
	if derr == nil {
		defer resp.Body.Close()
		e.Status = resp.StatusCode
		derr = copyResponse(w, resp, func() {
			firstByte.Store(true)
			s.r.PrefillDone(d)
			e.FirstByteMs = msSince(start)
		})
	}
	p := <-pres // the prefill leg ends with its answer, or with the client
	e.PrefillMs, e.PrefillStatus = p.ms, p.status
	if p.err != nil {
		e.PrefillError = p.err.Error()
	}
	switch {
	case derr == nil:
	case p.err != nil:
		fail(p.status, p.err)
	default:
		fail(http.StatusBadGateway, fmt.Errorf("router: decode on %s: %w", s.r.URL(d.Decode), derr))
	}
}

// withField sets one top-level field of a JSON object.
func withField(obj []byte, key, value string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	m[key] = json.RawMessage(value)
	return json.Marshal(m)
}
