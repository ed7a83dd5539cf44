package simengine

// The MooncakeConnector's bootstrap protocol, as the simulated engine models
// it. It reproduces vLLM at commit f1b4b2802cde3faa894510acb65beead29f57597
// (vllm/distributed/kv_transfer/kv_connector/v1/mooncake/, after PR #31034
// "rework mooncake connector and introduce its bootstrap server"); the
// citations below are file:line at that commit:
//
//   - A producer (kv_producer or kv_both) serves a bootstrap server; GET
//     /query answers 503 until its workers registered, then {engine_id:
//     {dp_rank: {tp_rank: {pp_rank: worker_addr}}}} (mooncake_utils.py:102,
//     :170-179).
//   - The proxy sends the prefill (P) and decode (D) legs at once, both with
//     the same X-Request-Id (examples/online_serving/disaggregated_serving/
//     mooncake_connector/mooncake_connector_proxy.py:268, :294, :325); the
//     engines pair the legs by their request ids less vLLM's random suffix
//     (mooncake_utils.py:194). The sim pairs them by "cmpl-" (or
//     "chatcmpl-") + X-Request-Id.
//   - The P leg carries {do_remote_decode: true} (proxy :257). Admitted, it
//     is registered to send (mooncake_connector.py:355); finished
//     length-capped, its blocks are held for the D (:426, :436-439) and its
//     answer carries no kv_transfer_params (:439: request_finished returns
//     None). A P leg that finishes any other way (EOS, abort) is not
//     processed (:426-429): its KV is never sent.
//   - The D leg carries {do_remote_prefill: true, remote_bootstrap_addr,
//     remote_engine_id, remote_dp_rank} (proxy :298-302). Without all three
//     the D warns that it "will not utilize KVTransfer" (connector :333,
//     :345) although it already waits for remote KV (:307-309): it never
//     gets it. Otherwise it queries the bootstrap server for the engine's
//     worker and asks the worker for the blocks it does not hold.
//   - The worker waits for the P leg to finish, creating the entry if the D
//     asks first (:700), for at most VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT
//     (:721, default 480 s in vllm/envs.py), then answers "Timeout waiting
//     for P side ready." (:732). A held P whose D never asks is freed after
//     the same timeout (:966-981).
//   - A D whose pull fails only logs it (:1095): its request stays waiting
//     for remote KV until the client gives up. The sim does the same.
//
// What the sim does not reproduce: the ZMQ side channel and the RDMA write
// (a D asks the producer's worker over HTTP, at worker_addr, a path of the
// bootstrap server; the transfer takes kv_transfer_us_per_token per token on
// the D), DP and TP > 1 (one engine, dp_rank 0, tp_rank 0), and POST
// /register (the sim's one worker registers itself at start).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	sends   map[string]*sendMeta // producer: reqs_need_send, by transfer key
	remotes map[string]map[string]string
	waiting int // consumer requests waiting for remote KV
}

// sendMeta is one P request's KV on the producer (SendBlockMeta).
type sendMeta struct {
	ready  chan struct{} // closed when the P request finished length-capped
	s      *seq          // the finished P request, its blocks held (under e.mu)
	blocks int           // its full prompt blocks
	expiry *time.Timer
}

func newMooncake(e *Engine) *mooncake {
	return &mooncake{e: e, engineID: randomID(), timeout: e.cfg.MooncakeAbortTimeout,
		client: &http.Client{Timeout: 10 * time.Second}, sends: map[string]*sendMeta{}, remotes: map[string]map[string]string{}}
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// transferKey pairs a request's two legs: its request id as vLLM derives
// it from X-Request-Id ("cmpl-" or "chatcmpl-" + the header; a random one
// without it, which pairs with nothing).
func transferKey(r *http.Request, chat bool) string {
	id := r.Header.Get("X-Request-Id")
	if id == "" {
		id = randomID()
	}
	if chat {
		return "chatcmpl-" + id
	}
	return "cmpl-" + id
}

// producer reports whether the engine serves a bootstrap server: every
// role but kv_consumer (mooncake_connector.py:509, :529).
func (m *mooncake) producer() bool { return m.e.cfg.KVRole != KVRoleConsumer }

// serveBootstrap serves the bootstrap server on ln until ctx ends.
func (m *mooncake) serveBootstrap(ctx context.Context, ln net.Listener) {
	m.mu.Lock()
	m.addr = ln.Addr().String()
	m.mu.Unlock()
	go m.serveOn(ctx, ln)
}

func (m *mooncake) serveOn(ctx context.Context, ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /query", m.handleQuery)
	mux.HandleFunc("POST /register", func(w http.ResponseWriter, _ *http.Request) {
		// The sim's one worker registered itself (mooncake_utils.py:128-131).
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "All 1 workers have been registered"})
	})
	mux.HandleFunc("POST "+xferPath, m.handleXfer)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	_ = srv.Serve(ln)
}

func (m *mooncake) workerAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return "http://" + m.addr + xferPath
}

// handleQuery is GET /query: the one engine, dp 0, tp 0, pp 0.
func (m *mooncake) handleQuery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]map[string]map[string]map[string]string{
		m.engineID: {"0": {"0": {"0": m.workerAddr()}}}})
}

// register is update_state_after_alloc for a P leg: the request will send
// its KV (an entry a D may have created already).
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
	m.e.signalWake()
	if why == "expired" {
		fmt.Fprintf(m.e.stderr, "sim: MooncakeConnector: request %s timed out after %s without being sent; freeing its blocks on the producer side\n", key, m.timeout)
	}
}

// xferRequest and xferResponse are the sim's pull exchange (in vLLM a
// MooncakeXferMetadata and MooncakeXferResponse over ZMQ).
type xferRequest struct {
	ReqID  string `json:"req_id"`
	Blocks int    `json:"blocks"`
}

type xferResponse struct {
	OK     bool   `json:"ok"`
	ErrMsg string `json:"err_msg,omitempty"`
}

// handleXfer is send_kv_to_decode for one request: wait for the P leg (at
// most the abort timeout), then send.
func (m *mooncake) handleXfer(w http.ResponseWriter, r *http.Request) {
	var x xferRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&x); err != nil || x.ReqID == "" {
		writeJSON(w, http.StatusBadRequest, xferResponse{ErrMsg: "bad transfer request"})
		return
	}
	sm := m.register(x.ReqID) // the D may ask before the P leg arrived
	t := time.NewTimer(m.timeout)
	defer t.Stop()
	select {
	case <-sm.ready:
	case <-t.C:
		m.mu.Lock()
		if m.sends[x.ReqID] == sm && sm.s == nil {
			delete(m.sends, x.ReqID) // asked for by this D alone: forget it
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
		m.release(x.ReqID, sm, "sent")
		writeJSON(w, http.StatusOK, xferResponse{OK: true})
	}
}

// errNoRemoteKV is the reason a D leg waits for KV that never comes.
var errNoRemoteKV = errors.New("no remote KV")

// pull is the D side of one request: find the producer's worker, ask it for
// the full blocks not held here, and pay their transfer. It returns the
// tokens received. On any failure it logs, as vLLM does, and waits — the
// request never runs — until the client or the engine ends it.
func (m *mooncake) pull(ctx context.Context, key string, req *completionRequest) (int, error) {
	kt := req.KVTransfer
	m.mu.Lock()
	m.waiting++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.waiting--
		m.mu.Unlock()
	}()
	fail := func(format string, args ...any) (int, error) {
		fmt.Fprintf(m.e.stderr, "sim: MooncakeConnector: "+format+"\n", args...)
		select {
		case <-ctx.Done():
		case <-m.e.stop:
		}
		return 0, errNoRemoteKV
	}
	if kt.RemoteEngineID == nil || kt.RemoteBootstrapAddr == nil || kt.RemoteDPRank == nil {
		return fail("Got invalid KVTransferParams: %s. This request will not utilize KVTransfer", req.kvRaw)
	}
	worker, err := m.remoteWorker(ctx, *kt.RemoteBootstrapAddr, *kt.RemoteEngineID)
	if err != nil {
		return fail("%v", err)
	}
	need := m.e.missingBlocks(req.Prompt)
	body, _ := json.Marshal(xferRequest{ReqID: key, Blocks: need})
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, worker, strings.NewReader(string(body)))
	if err != nil {
		return fail("MooncakeXferMetadata transfer failed for %s: %v", key, err)
	}
	resp, err := (&http.Client{}).Do(hr) // waits as long as the producer does (its abort timeout)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return fail("MooncakeXferMetadata transfer failed for %s: %v", key, err)
	}
	var x xferResponse
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&x)
	resp.Body.Close()
	if err != nil || !x.OK {
		return fail("pulling kv_caches for %s failed: %s", key, x.ErrMsg)
	}
	ext := need * m.e.cfg.BlockSize
	if err := m.e.transfer(ctx, ext); err != nil {
		return 0, err
	}
	return ext, nil
}

// remoteWorker returns the worker address of engineID behind the bootstrap
// server at addr, querying it once (handle_new_engine_id).
func (m *mooncake) remoteWorker(ctx context.Context, addr, engineID string) (string, error) {
	m.mu.Lock()
	if w, ok := m.remotes[addr][engineID]; ok {
		m.mu.Unlock()
		return w, nil
	}
	m.mu.Unlock()
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/query", nil)
	if err != nil {
		return "", fmt.Errorf("Failed to connect to bootstrap server %s: %w", addr, err)
	}
	resp, err := m.client.Do(hr)
	if err != nil {
		return "", fmt.Errorf("Failed to connect to bootstrap server %s: %w", addr, err)
	}
	defer resp.Body.Close()
	var engines map[string]map[string]map[string]map[string]string
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&engines) != nil {
		return "", fmt.Errorf("Failed to connect to bootstrap server %s: status %d", addr, resp.StatusCode)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	known := map[string]string{}
	for id, dp := range engines {
		if w := dp["0"]["0"]["0"]; w != "" {
			known[id] = w
		}
	}
	m.remotes[addr] = known
	w, ok := known[engineID]
	if !ok {
		return "", fmt.Errorf("Failed to find remote engine_id %s from bootstrap server %s", engineID, addr)
	}
	return w, nil
}

// pending is the number of requests the producer tracks for a decode:
// held for one, or asked for by one ahead of its prefill.
func (m *mooncake) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sends)
}

// waitingRemote is the number of requests waiting for remote KV.
func (m *mooncake) waitingRemote() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.waiting
}
