package simengine

// The MooncakeConnector's bootstrap protocol, as the simulated engine models
// it. It reproduces vLLM 0.18.1: citations are file:line at vLLM commit
// b36adfa349cfab0e79f3d736d5e5413bd3ee19f5 (main's last commit before the
// 0.18 branch cut; the protocol is the same from PR #31034's merge,
// 0d6ccf68, to 9aaf83ef, 2026-05-19), under
// vllm/distributed/kv_transfer/kv_connector/v1/mooncake/ unless named
// otherwise. The exact bodies are golden files in internal/conformance,
// which the router's tests read too.
//
//   - A producer (kv_producer or kv_both) serves a bootstrap server
//     (mooncake_connector.py:526-532); its workers POST /register {engine_id,
//     dp_rank, tp_rank, pp_rank, addr} (:592-604; mooncake_utils.py:81-124).
//     GET /query answers 200 with the engines keyed by DP rank,
//     {"0": {"engine_id": ..., "worker_addr": {"0": {"0": "tcp://host:port"}}}}
//     (mooncake_utils.py:28-32, :57, :126-127), and {} before any worker
//     registered (:42). It never answers 503.
//   - The proxy sends the prefill (P) and decode (D) legs at once, both with
//     kv_transfer_params.transfer_id "xfer-" + one uuid (examples/
//     online_serving/disaggregated_serving/mooncake_connector/
//     mooncake_connector_proxy.py:257-261, :299-305); the engines pair the
//     legs by transfer_id (mooncake_connector.py:140-151, :698-707,
//     :1202-1225), not by request id.
//   - The P leg carries {do_remote_decode: true, transfer_id}. Admitted, it
//     is registered to send (:350-356; without a transfer_id it is not, and
//     its KV is never sent); finished length-capped, its blocks are held
//     for the D (:428-441) and its answer carries no kv_transfer_params
//     (:441: request_finished returns None). A P leg that finishes any other
//     way (EOS, abort) is not processed (:428-432): its KV is never sent.
//   - The D leg carries {do_remote_prefill: true, remote_bootstrap_addr,
//     remote_engine_id, transfer_id}. Without all three the D warns that it
//     "will not utilize KVTransfer" (:327-348) although it already waits for
//     remote KV (:301-306; vllm/v1/core/sched/scheduler.py:763-766): it never
//     gets it. Otherwise it queries the bootstrap server for the engine's
//     workers (:1118-1144) and asks the worker for the blocks it does not
//     hold.
//   - The worker waits for the P leg to finish, creating the entry if the D
//     asks first (:698-707), for at most VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT
//     (:721-740, default 480 s in vllm/envs.py), then answers "Timeout
//     waiting for P side ready.". A held P whose D never asks is freed after
//     the same timeout (:979-1005).
//   - A D whose pull fails only logs it (:1094-1116): its request stays
//     waiting for remote KV until the client gives up. The sim does the
//     same.
//
// What the sim does not reproduce: the ZMQ side channel and the RDMA write
// (a D asks the producer's worker over HTTP at the host:port of the
// registered tcp:// address, a path of the bootstrap server; the transfer
// takes kv_transfer_us_per_token per token on the D), DP and TP > 1 (one
// engine, dp_rank 0, tp_rank 0, pp_rank 0), and the time a real worker takes
// to register (the sim's one worker POSTs /register to its own bootstrap
// server MooncakeRegisterDelay after it listens).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// KV connector protocols a sim with a KVRole speaks.
const (
	// KVConnectorNixl (the default): the prefill answers kv_transfer_params
	// and the proxy passes them to the decode (pd.go).
	KVConnectorNixl = "NixlConnector"
	// KVConnectorMooncake: the bootstrap protocol of this file.
	KVConnectorMooncake = "MooncakeConnector"
)

// DefaultBootstrapPort is vLLM's VLLM_MOONCAKE_BOOTSTRAP_PORT default (the
// proxy's too: mooncake_connector_proxy.py:90).
const DefaultBootstrapPort = 8998

// DefaultMooncakeAbortTimeout is VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT's
// default.
const DefaultMooncakeAbortTimeout = 480 * time.Second

// xferPath is the sim's stand-in for a worker's ZMQ side channel, served by
// the bootstrap server.
const xferPath = "/mbench-sim/xfer"

// mooncake is one engine's MooncakeConnector: the producer side (bootstrap
// server, requests held for their D) and the consumer side (pulls).
type mooncake struct {
	e        *Engine
	engineID string
	timeout  time.Duration
	client   *http.Client

	mu      sync.Mutex
	addr    string               // the bootstrap server's host:port, once listening
	workers map[int]*bootstrapDP // the bootstrap server's registered workers, by DP rank
	sends   map[string]*sendMeta // producer: reqs_need_send, by transfer_id
	remotes map[string]string    // consumer: a remote engine's worker address, by engine id
	waiting int                  // consumer requests waiting for remote KV
}

// bootstrapDP is one DP rank's entry of a bootstrap server (EngineEntry,
// mooncake_utils.py:28-32), rendered as GET /query renders it.
type bootstrapDP struct {
	EngineID   string                       `json:"engine_id"`
	WorkerAddr map[string]map[string]string `json:"worker_addr"` // tp_rank → pp_rank → tcp://host:port
}

// sendMeta is one P request's KV on the producer (SendBlockMeta).
type sendMeta struct {
	ready  chan struct{} // closed when the P request finished length-capped
	s      *seq          // the finished P request, its blocks held (under e.mu)
	blocks int           // its full prompt blocks
	expiry *time.Timer
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// producer reports whether the engine serves a bootstrap server: every
// role but kv_consumer (mooncake_connector.py:507, :526-532).
func (m *mooncake) producer() bool { return m.e.cfg.KVRole != KVRoleConsumer }

// serveBootstrap serves the bootstrap server on ln until ctx ends; the
// sim's one worker registers with it after MooncakeRegisterDelay.
func (m *mooncake) serveBootstrap(ctx context.Context, ln net.Listener) {
	m.mu.Lock()
	m.addr = ln.Addr().String()
	m.mu.Unlock()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /query", m.handleQuery)
	mux.HandleFunc("POST /register", m.handleRegister)
	mux.HandleFunc("POST "+xferPath, m.handleXfer)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"}) // FastAPI's 404
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() { _ = srv.Serve(ln) }()
	go m.registerWorker(ctx)
}

// registerWorker is register_worker_with_bootstrap for the sim's one
// worker (dp 0, tp 0, pp 0): POST /register with its address, retried until
// it is taken (mooncake_connector.py:592-620).
func (m *mooncake) registerWorker(ctx context.Context) {
	t := time.NewTimer(m.e.cfg.MooncakeRegisterDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	m.mu.Lock()
	addr := m.addr
	m.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"engine_id": m.engineID, "dp_rank": 0, "tp_rank": 0, "pp_rank": 0, "addr": "tcp://" + addr})
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/register", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := m.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			fmt.Fprintf(m.e.stderr, "sim: MooncakeConnector: registering with the bootstrap server: status %d\n", resp.StatusCode)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// handleRegister is register_worker (mooncake_utils.py:81-124): a worker's
// address under its DP, TP and PP rank; 400 for another engine on a DP rank
// or a rank registered twice; 422 for a body that is not a
// RegisterWorkerPayload (as FastAPI validates it).
func (m *mooncake) handleRegister(w http.ResponseWriter, r *http.Request) {
	var p struct {
		EngineID *string `json:"engine_id"`
		DPRank   *int    `json:"dp_rank"`
		TPRank   *int    `json:"tp_rank"`
		PPRank   *int    `json:"pp_rank"`
		Addr     *string `json:"addr"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&p); err != nil ||
		p.EngineID == nil || p.DPRank == nil || p.TPRank == nil || p.PPRank == nil || p.Addr == nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "a RegisterWorkerPayload {engine_id, dp_rank, tp_rank, pp_rank, addr} is required"})
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	dp := m.workers[*p.DPRank]
	if dp == nil {
		dp = &bootstrapDP{EngineID: *p.EngineID, WorkerAddr: map[string]map[string]string{}}
		m.workers[*p.DPRank] = dp
	}
	if dp.EngineID != *p.EngineID {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": fmt.Sprintf("Engine ID mismatch for dp_rank=%d: expected %s, got %s", *p.DPRank, dp.EngineID, *p.EngineID)})
		return
	}
	tp := strconv.Itoa(*p.TPRank)
	if dp.WorkerAddr[tp] == nil {
		dp.WorkerAddr[tp] = map[string]string{}
	}
	pp := strconv.Itoa(*p.PPRank)
	if old, ok := dp.WorkerAddr[tp][pp]; ok {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": fmt.Sprintf("Worker with dp_rank=%d, tp_rank=%s, pp_rank=%s is already registered at %s, but still want to register at %s", *p.DPRank, tp, pp, old, *p.Addr)})
		return
	}
	dp.WorkerAddr[tp][pp] = *p.Addr
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleQuery is GET /query: the registered workers by DP rank, {} before
// any registered, in FastAPI's compact rendering.
func (m *mooncake) handleQuery(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	out := make(map[string]*bootstrapDP, len(m.workers))
	for rank, dp := range m.workers {
		out[strconv.Itoa(rank)] = dp
	}
	b, _ := json.Marshal(out) // under m.mu: the entries are not copied
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// register is update_state_after_alloc for a P leg with a transfer_id: the
// request will send its KV (an entry a D may have created already).
func (m *mooncake) register(key string) *sendMeta {
	m.mu.Lock()
	defer m.mu.Unlock()
	sm := m.sends[key]
	if sm == nil {
		sm = &sendMeta{ready: make(chan struct{})}
		m.sends[key] = sm
	}
	return sm
}

// finished is request_finished for a P leg, under e.mu: length-capped, its
// blocks are held for the D (true: the caller must not free them) until
// sent or expired; otherwise the entry is dropped.
func (m *mooncake) finished(key string, s *seq, capped bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	sm := m.sends[key]
	if sm == nil || !capped || sm.s != nil {
		delete(m.sends, key) // not processed: the KV is never sent
		return false
	}
	sm.s, sm.blocks = s, (s.promptLen-1)/m.e.cfg.BlockSize
	close(sm.ready)
	sm.expiry = time.AfterFunc(m.timeout, func() { m.release(key, sm, "expired") })
	return true
}

// release frees a held P request's blocks and forgets it (sent, or expired
// after the abort timeout: fetch_finished_sending_reqs).
func (m *mooncake) release(key string, sm *sendMeta, why string) {
	m.e.mu.Lock()
	defer m.e.mu.Unlock()
	m.mu.Lock()
	cur := m.sends[key]
	if cur == sm {
		delete(m.sends, key)
	}
	held := sm.s
	sm.s = nil
	m.mu.Unlock()
	if cur != sm || held == nil {
		return
	}
	if sm.expiry != nil {
		sm.expiry.Stop()
	}
	m.e.sch.free(held)
	notify(m.e.wake)
	if why == "expired" {
		fmt.Fprintf(m.e.stderr, "sim: MooncakeConnector: request %s timed out after %s without being sent; freeing its blocks on the producer side\n", key, m.timeout)
	}
}

// xferRequest and xferResponse are the sim's pull exchange (in vLLM a
// MooncakeXferMetadata and MooncakeXferResponse over ZMQ).
type xferRequest struct {
	TransferID string `json:"transfer_id"`
	Blocks     int    `json:"blocks"`
}

type xferResponse struct {
	OK     bool   `json:"ok"`
	ErrMsg string `json:"err_msg,omitempty"`
}

// handleXfer is send_kv_to_decode for one request: wait for the P leg (at
// most the abort timeout), then send.
func (m *mooncake) handleXfer(w http.ResponseWriter, r *http.Request) {
	var x xferRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&x); err != nil || x.TransferID == "" {
		writeJSON(w, http.StatusBadRequest, xferResponse{ErrMsg: "bad transfer request"})
		return
	}
	sm := m.register(x.TransferID) // the D may ask before the P leg arrived
	t := time.NewTimer(m.timeout)
	defer t.Stop()
	select {
	case <-sm.ready:
	case <-t.C:
		m.mu.Lock()
		if m.sends[x.TransferID] == sm && sm.s == nil {
			delete(m.sends, x.TransferID) // asked for by this D alone: forget it
		}
		m.mu.Unlock()
		writeJSON(w, http.StatusOK, xferResponse{ErrMsg: "Timeout waiting for P side ready."})
		return
	case <-r.Context().Done():
		return
	}
	m.mu.Lock()
	blocks, held := sm.blocks, sm.s != nil
	m.mu.Unlock()
	switch {
	case !held:
		writeJSON(w, http.StatusOK, xferResponse{ErrMsg: "Timeout waiting for P side ready."}) // expired meanwhile
	case blocks < x.Blocks:
		writeJSON(w, http.StatusOK, xferResponse{ErrMsg: "P num blocks less than D"})
	default:
		m.release(x.TransferID, sm, "sent")
		writeJSON(w, http.StatusOK, xferResponse{OK: true})
	}
}

// errNoRemoteKV is the reason a D leg waits for KV that never comes.
var errNoRemoteKV = errors.New("no remote KV")

// pull is the D side of one request: find the producer's worker, ask it for
// the full blocks not held here, and pay their transfer. On any failure it logs, as vLLM does, and waits — the
// request never runs — until the client or the engine ends it.
func (m *mooncake) pull(ctx context.Context, req *completionRequest) error {
	kt := req.KVTransfer
	m.mu.Lock()
	m.waiting++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.waiting--
		m.mu.Unlock()
	}()
	fail := func(format string, args ...any) error {
		fmt.Fprintf(m.e.stderr, "sim: MooncakeConnector: "+format+"\n", args...)
		select {
		case <-ctx.Done():
		case <-m.e.stop:
		}
		return errNoRemoteKV
	}
	if kt.RemoteEngineID == nil || kt.RemoteBootstrapAddr == nil || kt.TransferID == nil {
		return fail("Got invalid KVTransferParams: %s. This request will not utilize KVTransfer", req.kvRaw)
	}
	worker, err := m.remoteWorker(ctx, *kt.RemoteBootstrapAddr, *kt.RemoteEngineID)
	if err != nil {
		return fail("%v", err)
	}
	xfer := *kt.TransferID
	need := m.e.missingBlocks(req.Prompt)
	body, _ := json.Marshal(xferRequest{TransferID: xfer, Blocks: need})
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, worker, bytes.NewReader(body))
	if err != nil {
		return fail("MooncakeXferMetadata transfer failed for %s: %v", xfer, err)
	}
	resp, err := (&http.Client{}).Do(hr) // waits as long as the producer does (its abort timeout)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fail("MooncakeXferMetadata transfer failed for %s: %v", xfer, err)
	}
	var x xferResponse
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&x)
	resp.Body.Close()
	if err != nil || !x.OK {
		return fail("pulling kv_caches for %s failed: %s", xfer, x.ErrMsg)
	}
	return m.e.transfer(ctx, need*m.e.cfg.BlockSize)
}

// remoteWorker returns where to ask engineID's worker (tp 0, pp 0) for KV,
// querying the bootstrap server at addr when the engine is new
// (handle_new_engine_id, _connect_to_prefiller_bootstrap).
func (m *mooncake) remoteWorker(ctx context.Context, addr, engineID string) (string, error) {
	m.mu.Lock()
	w, ok := m.remotes[engineID]
	m.mu.Unlock()
	if !ok {
		if err := m.queryBootstrap(ctx, addr); err != nil {
			return "", err
		}
		m.mu.Lock()
		w, ok = m.remotes[engineID]
		m.mu.Unlock()
		if !ok {
			return "", fmt.Errorf("Failed to find remote engine_id %s from bootstrap server %s", engineID, addr)
		}
	}
	host, found := strings.CutPrefix(w, "tcp://")
	if !found {
		return "", fmt.Errorf("remote engine %s's worker address %q is not tcp://host:port", engineID, w)
	}
	return "http://" + host + xferPath, nil
}

// queryBootstrap learns the engines behind a bootstrap server.
func (m *mooncake) queryBootstrap(ctx context.Context, addr string) error {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/query", nil)
	if err != nil {
		return fmt.Errorf("Failed to connect to bootstrap server %s: %w", addr, err)
	}
	resp, err := m.client.Do(hr)
	if err != nil {
		return fmt.Errorf("Failed to connect to bootstrap server %s: %w", addr, err)
	}
	defer resp.Body.Close()
	var engines map[string]bootstrapDP
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&engines) != nil {
		return fmt.Errorf("Failed to connect to bootstrap server %s: status %d", addr, resp.StatusCode)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, dp := range engines {
		if w := dp.WorkerAddr["0"]["0"]; w != "" {
			m.remotes[dp.EngineID] = w
		}
	}
	return nil
}

// waitingRemote is the number of requests waiting for remote KV.
func (m *mooncake) waitingRemote() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waiting
}
