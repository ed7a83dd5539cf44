package router

// vLLM 0.18.1's MooncakeConnector bootstrap protocol, as its example proxy
// speaks it. Citations are file:line at vLLM commit
// b36adfa349cfab0e79f3d736d5e5413bd3ee19f5 (main's last commit before the
// 0.18 branch cut; the protocol is the same from PR #31034's merge,
// 0d6ccf68, to 9aaf83ef, 2026-05-19): the proxy is examples/online_serving/disaggregated_serving/
// mooncake_connector/mooncake_connector_proxy.py, the server
// vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_utils.py.
// The exact bodies are golden files in internal/conformance, which the sim's
// tests read too.
//
//   - Before serving, the proxy waits for each producer's /health, then asks
//     its bootstrap server GET /query (proxy :38-63), which answers 200 with
//     its engines keyed by DP rank, {"0": {"engine_id": ..., "worker_addr":
//     {tp: {pp: addr}}}} (mooncake_utils.py:28-32, :57, :126-127), and {}
//     while no worker has registered (:42). The proxy answers 503 until then
//     (:316-317).
//   - Per request: one fresh uuid (:321), sent as X-Request-Id on both legs
//     (:270, :296); the prefill leg carries {do_remote_decode: true,
//     do_remote_prefill: false, transfer_id: "xfer-" + the uuid} with
//     max_tokens 1 and the X-data-parallel-rank of the DP rank it goes to
//     (:256-272), fired without waiting (:327-331); at once the decode leg
//     {do_remote_decode: false, do_remote_prefill: true,
//     remote_bootstrap_addr, remote_engine_id (the DP rank's, from /query),
//     transfer_id} (:299-305), streamed back. The engines pair the legs by
//     transfer_id (mooncake_connector.py:140-151, :698-707).
//
// The router differs from the example where the example loses requests: it
// waits for /query to name an engine (the example takes {} as zero DP ranks
// and cycles over none), treats any other answer — a 404 from an API port
// given by mistake, another revision's shape — as not ready, saying which
// port answered what; it sets ignore_eos on the prefill leg (a prefill whose
// one token is EOS finishes other than length-capped, and the connector
// never sends its KV: mooncake_connector.py:428-432); and when the prefill
// leg fails before the decode's first bytes, the decode leg (which would
// wait for KV that never comes) is cancelled and the client gets the
// prefill's error.

import (
	"bytes"
	"cmp"
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

	mu      sync.Mutex
	engines []dpEngine // by DP rank, ascending; nil until /query named one
	lastErr string
	next    atomic.Uint64 // the DP rank the next request prefills on, as the proxy cycles them (:31-35)
}

// dpEngine is one DP rank's engine behind a bootstrap server.
type dpEngine struct {
	rank int
	id   string
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
		ports = slices.Repeat([]int{8998}, len(prefill))
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
// names an engine, in the background until ctx ends.
func (s *Server) discoverBootstrap(ctx context.Context) {
	for _, i := range slices.Sorted(maps.Keys(s.boot)) {
		b := s.boot[i]
		go func() {
			wait := 50 * time.Millisecond
			for {
				if err := b.query(ctx, s.client); err == nil {
					b.mu.Lock()
					engines := b.engines
					b.mu.Unlock()
					fmt.Fprintf(s.opt.Messages, "router: bootstrap server %s of %s ready (%d DP rank(s), rank %d engine %q)\n", b.addr, s.r.URL(i), len(engines), engines[0].rank, engines[0].id)
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

// queryEntry is one DP rank's entry in GET /query's answer (EngineEntry,
// mooncake_utils.py:28-32).
type queryEntry struct {
	EngineID   string                       `json:"engine_id"`
	WorkerAddr map[string]map[string]string `json:"worker_addr"` // tp_rank → pp_rank → address
}

// query asks b's GET /query once. Only a 200 with at least one DP rank's
// engine is ready; {} is "no worker registered yet"; anything else — a 404
// (an API port given as the bootstrap port), another shape — is not ready,
// and the error says what the port answered.
func (b *bootstrap) query(ctx context.Context, c *http.Client) error {
	engines, err := b.ask(ctx, c)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.lastErr = err.Error()
		return err
	}
	b.engines, b.lastErr = engines, ""
	return nil
}

func (b *bootstrap) ask(ctx context.Context, c *http.Client) ([]dpEngine, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(qctx, http.MethodGet, b.addr+"/query", nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET /query on port %s: %w", b.port, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("GET /query on port %s: %w", b.port, err)
	}
	shown := string(bytes.TrimSpace(body))
	if len(shown) > 200 {
		shown = shown[:200] + "…"
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("port %s answered GET /query with 404 %s: not a MooncakeConnector bootstrap server "+
			"(an engine's API port? give each producer's VLLM_MOONCAKE_BOOTSTRAP_PORT)", b.port, shown)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("port %s answered GET /query with status %d: %s", b.port, resp.StatusCode, shown)
	}
	engines, err := parseQuery(body)
	switch {
	case errors.Is(err, errNoWorker):
		return nil, fmt.Errorf("port %s answered GET /query with {}: no worker has registered yet", b.port)
	case err != nil:
		return nil, fmt.Errorf("port %s answered GET /query with %s: not vLLM 0.18's bootstrap answer (%v; want {\"<dp_rank>\": {\"engine_id\": ..., \"worker_addr\": ...}})", b.port, shown, err)
	}
	return engines, nil
}

// errNoWorker is a /query answer of {}: no worker has registered yet.
var errNoWorker = errors.New("no worker registered")

// parseQuery reads a 200 answer of GET /query: the engines by DP rank,
// ascending, or errNoWorker for {}, or why it is not the released shape.
func parseQuery(body []byte) ([]dpEngine, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		return nil, errNoWorker
	}
	var engines []dpEngine
	for k, v := range raw {
		rank, err := strconv.Atoi(k)
		if err != nil || rank < 0 || strconv.Itoa(rank) != k {
			return nil, fmt.Errorf("key %q is not a DP rank", k)
		}
		var e queryEntry
		d := json.NewDecoder(bytes.NewReader(v))
		d.DisallowUnknownFields()
		if err := d.Decode(&e); err != nil {
			return nil, fmt.Errorf("DP rank %d: %w", rank, err)
		}
		if e.EngineID == "" || len(e.WorkerAddr) == 0 {
			return nil, fmt.Errorf("DP rank %d has no engine_id or worker_addr", rank)
		}
		engines = append(engines, dpEngine{rank, e.EngineID})
	}
	slices.SortFunc(engines, func(x, y dpEngine) int { return x.rank - y.rank })
	return engines, nil
}

// bootstrapReady is nil when every bootstrap server named an engine.
func (s *Server) bootstrapReady() error {
	for _, i := range slices.Sorted(maps.Keys(s.boot)) {
		b := s.boot[i]
		b.mu.Lock()
		ready, last := b.engines != nil, b.lastErr
		b.mu.Unlock()
		if !ready {
			return fmt.Errorf("router: the bootstrap server %s of %s has not named an engine (%s)", b.addr, s.r.URL(i), cmp.Or(last, "not asked yet"))
		}
	}
	return nil
}

// pick is the DP rank and engine the next request prefills on, cycling
// over the ranks /query named.
func (b *bootstrap) pick() dpEngine {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.engines[int((b.next.Add(1)-1)%uint64(len(b.engines)))]
}

// mooncakePrefillParams and mooncakeDecodeParams are the legs'
// kv_transfer_params, their fields in the proxy's order
// (internal/conformance's golden files hold them).
type mooncakePrefillParams struct {
	DoRemoteDecode  bool   `json:"do_remote_decode"`
	DoRemotePrefill bool   `json:"do_remote_prefill"`
	TransferID      string `json:"transfer_id"`
}

type mooncakeDecodeParams struct {
	DoRemoteDecode      bool   `json:"do_remote_decode"`
	DoRemotePrefill     bool   `json:"do_remote_prefill"`
	RemoteBootstrapAddr string `json:"remote_bootstrap_addr"`
	RemoteEngineID      string `json:"remote_engine_id"`
	TransferID          string `json:"transfer_id"`
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
	requestID := newTransferID()
	xfer := "xfer-" + requestID
	e.TransferID = xfer
	fail := func(status int, err error) {
		e.Status, e.Error = status, err.Error()
		http.Error(w, e.Error, status)
	}
	b := s.boot[d.Prefill]
	dp := b.pick()
	pParams, _ := json.Marshal(mooncakePrefillParams{DoRemoteDecode: true, TransferID: xfer})
	pFields := maps.Clone(fields)
	pFields["ignore_eos"] = json.RawMessage("true")
	pBody, err := prefillBody(pFields, string(pParams))
	if err != nil {
		fail(http.StatusInternalServerError, err)
		return
	}
	dParams, _ := json.Marshal(mooncakeDecodeParams{DoRemotePrefill: true, RemoteBootstrapAddr: b.addr, RemoteEngineID: dp.id, TransferID: xfer})
	dFields := maps.Clone(fields)
	dFields["kv_transfer_params"] = dParams
	dBody, err := json.Marshal(dFields)
	if err != nil {
		fail(http.StatusInternalServerError, err)
		return
	}
	h := req.Header.Clone()
	h.Set("X-Request-Id", requestID)
	ph := h.Clone()
	ph.Set("Accept", "application/json")
	ph.Set("X-data-parallel-rank", strconv.Itoa(dp.rank))

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
