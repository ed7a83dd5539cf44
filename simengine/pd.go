package simengine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"
)

// KV roles of a sim with a (modelled) KV connector, as vLLM's
// kv_transfer_config.kv_role names them.
const (
	KVRoleNone     = ""
	KVRoleProducer = "kv_producer"
	KVRoleConsumer = "kv_consumer"
	KVRoleBoth     = "kv_both"
)

// kvTransferParams is the part of vLLM's kv_transfer_params the sim reads.
//
// NixlConnector (the default protocol): vLLM's toy proxy
// (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py at vLLM
// commit b36adfa349cfab0e79f3d736d5e5413bd3ee19f5, in 0.18.1) sends the
// prefill instance {"do_remote_decode": true, ...} with max_tokens 1
// (:161-175) and waits for its answer (:220-223); the answer's
// kv_transfer_params {"do_remote_prefill": true, "remote_engine_id",
// "remote_block_ids", "remote_host", "remote_port", ...} — present only
// when the prefill finished length-capped (vllm/distributed/kv_transfer/
// kv_connector/v1/nixl_connector.py:918-924, :947-956) — go to the decode
// instance with the original request (:225-230).
//
// MooncakeConnector: both legs carry one transfer_id, the decode leg names
// the producer's bootstrap server and engine instead (remote_bootstrap_addr,
// remote_engine_id; mooncake.go), and the prefill's answer carries none.
type kvTransferParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteBlockIDs  []int32 `json:"remote_block_ids"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
	// MooncakeConnector's legs.
	RemoteBootstrapAddr *string `json:"remote_bootstrap_addr"`
	TransferID          *string `json:"transfer_id"`
}

// decodeKVTransfer validates a request's kv_transfer_params against the
// sim's role and connector. Absent or null params are no transfer. A
// MooncakeConnector decode leg without its fields is accepted here: vLLM
// takes it and never serves it (mooncake.go).
func decodeKVTransfer(raw json.RawMessage, role, connector string) (*kvTransferParams, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var p kvTransferParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, badRequest("kv_transfer_params: %v", err)
	}
	switch {
	case role == KVRoleNone && (p.DoRemoteDecode || p.DoRemotePrefill):
		return nil, badRequest("kv_transfer_params: this simulated engine has no KV connector (start it with --kv-role)")
	case p.DoRemoteDecode && p.DoRemotePrefill:
		return nil, badRequest("kv_transfer_params: do_remote_decode and do_remote_prefill are both set")
	case p.DoRemoteDecode && role == KVRoleConsumer:
		return nil, badRequest("kv_transfer_params: do_remote_decode on a kv_consumer (it cannot send KV)")
	case p.DoRemotePrefill && role == KVRoleProducer:
		return nil, badRequest("kv_transfer_params: do_remote_prefill on a kv_producer (it cannot receive KV)")
	case connector != KVConnectorMooncake && p.DoRemotePrefill && (p.RemoteEngineID == nil || p.RemoteHost == nil || p.RemotePort == nil):
		return nil, badRequest("kv_transfer_params: do_remote_prefill needs remote_engine_id, remote_host and remote_port (from the prefill instance's answer)")
	}
	return &p, nil
}

// remoteDecodeParams is what a prefill instance reached at addr (the
// request's Host) answers with: where the KV of the request is, for the
// decode instance.
func remoteDecodeParams(addr string, blocks []int32) string {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	if blocks == nil {
		blocks = []int32{}
	}
	b, _ := json.Marshal(struct {
		DoRemotePrefill bool    `json:"do_remote_prefill"`
		DoRemoteDecode  bool    `json:"do_remote_decode"`
		RemoteBlockIDs  []int32 `json:"remote_block_ids"`
		RemoteEngineID  string  `json:"remote_engine_id"`
		RemoteHost      string  `json:"remote_host"`
		RemotePort      int     `json:"remote_port"`
		TPSize          int     `json:"tp_size"`
	}{true, false, blocks, "mbench-sim-" + addr, host, p, 1})
	return string(b)
}

// pullKV models a decode instance receiving a prompt's KV from the prefill
// instance: the full blocks it does not hold locally are "transferred",
// taking KVTransferUsPerToken per token, before the request joins the
// queue. The transfer waits outside the engine's lock, so other requests
// run.
func (e *Engine) pullKV(ctx context.Context, req *completionRequest) error {
	return e.transfer(ctx, e.missingBlocks(req.Prompt)*e.cfg.BlockSize)
}

// missingBlocks is the number of a prompt's full blocks (never the last
// token's) this engine's prefix cache does not hold.
func (e *Engine) missingBlocks(prompt []int64) int {
	bs := e.cfg.BlockSize
	full := (len(prompt) - 1) / bs
	hashes := chainHashes(prompt, bs)
	e.mu.Lock()
	defer e.mu.Unlock()
	return full - len(e.sch.kv.lookup(hashes, full))
}

// transfer waits the modelled time to receive tokens tokens' KV.
func (e *Engine) transfer(ctx context.Context, tokens int) error {
	d := time.Duration(float64(tokens) * e.cfg.KVTransferUsPerToken * float64(time.Microsecond))
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kv transfer: %w", ctx.Err())
	}
}
