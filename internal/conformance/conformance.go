// Package conformance owns the golden wire bodies of other systems'
// protocols that mbench speaks or models: the exact bytes a released
// upstream sends or answers, read by the tests of both sides of mbench (the
// router that speaks a protocol and the simulated engine that models its
// server), so the two cannot drift into agreeing with each other instead of
// with the release.
//
// Each body cites the upstream file:line it was read from, at a commit the
// named release contains (docs/routing.md, "How the citations were
// checked").
package conformance

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed mooncake/*.json
var files embed.FS

// vLLM 0.18.1's MooncakeConnector bootstrap protocol, read at vLLM commit
// b36adfa349cfab0e79f3d736d5e5413bd3ee19f5 (main's last commit before the
// 0.18 release branch was cut). The bodies are the same from PR #31034's
// merge (0d6ccf68fa2c439e17d02f26c4044ed5df7f7099) to main's
// 9aaf83ef502fc37bc647f6e474314d48ba36cd1c (2026-05-19): the connector's
// internals changed, the bootstrap server's /query and the proxy's legs did
// not. Paths: mooncake_utils.py
// and mooncake_connector.py under
// vllm/distributed/kv_transfer/kv_connector/v1/mooncake/; the proxy is
// examples/online_serving/disaggregated_serving/mooncake_connector/
// mooncake_connector_proxy.py.
const (
	// MooncakeQueryUnregistered is GET /query's 200 body before any worker
	// has registered: the server's workers dict is empty
	// (mooncake_utils.py:42, :126-127).
	MooncakeQueryUnregistered = "mooncake/query_unregistered.json"
	// MooncakeQueryRegistered is GET /query's 200 body once the one worker
	// of DP rank 0, TP rank 0, PP rank 0 has registered: dict[int,
	// EngineEntry] keyed by dp_rank (mooncake_utils.py:28-32, :57,
	// :83-87, :114), worker_addr keyed by tp_rank then pp_rank, the address
	// the worker registered (mooncake_connector.py:595:
	// make_zmq_path("tcp", hostname, side_channel_port)); rendered as
	// FastAPI's JSONResponse renders it (compact separators).
	MooncakeQueryRegistered = "mooncake/query_registered.json"
	// MooncakePrefillParams are the prefill leg's kv_transfer_params
	// (proxy :257-261), MooncakePrefillHeaders its headers besides
	// Authorization (proxy :268-272).
	MooncakePrefillParams  = "mooncake/prefill_kv_transfer_params.json"
	MooncakePrefillHeaders = "mooncake/prefill_headers.json"
	// MooncakeDecodeParams are the decode leg's kv_transfer_params (proxy
	// :299-305: the producer's bootstrap address, :27-28 and :91; the engine
	// id its /query gave for the DP rank, :56-57; the prefill leg's
	// transfer_id; no DP rank), MooncakeDecodeHeaders its headers besides
	// Authorization (proxy :294-297). The engines pair the two legs by
	// transfer_id (mooncake_connector.py:140-151, :698-707, :1202-1225); a
	// decode leg without remote_engine_id, remote_bootstrap_addr and
	// transfer_id waits for remote KV that never comes (:327-348).
	MooncakeDecodeParams  = "mooncake/decode_kv_transfer_params.json"
	MooncakeDecodeHeaders = "mooncake/decode_headers.json"
)

// Mooncake holds the values a Mooncake body carries that differ per engine
// and per request.
type Mooncake struct {
	EngineID      string // the producer engine's id (a uuid4)
	WorkerAddr    string // the registered worker's address, tcp://host:port
	BootstrapAddr string // the producer's bootstrap server, http://host:port
	RequestID     string // the proxy's per-request uuid4; transfer_id is "xfer-" + it
}

// MooncakeGolden are the values the golden files carry.
var MooncakeGolden = Mooncake{
	EngineID:      "4f0e6f0a-8a53-4c1b-9a57-6d7e0a1c2b3d",
	WorkerAddr:    "tcp://10.0.0.5:45123",
	BootstrapAddr: "http://10.0.0.5:8998",
	RequestID:     "9b2d1c7e-5a4f-4e3b-8c6d-1f2e3a4b5c6d",
}

// MooncakeBody is the golden body name with the golden values replaced by
// v's (empty fields of v keep the golden value).
func MooncakeBody(name string, v Mooncake) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("conformance: %v", err)) // a name not among the constants above
	}
	s := string(b)
	for _, r := range [][2]string{
		{MooncakeGolden.EngineID, v.EngineID},
		{MooncakeGolden.WorkerAddr, v.WorkerAddr},
		{MooncakeGolden.BootstrapAddr, v.BootstrapAddr},
		{MooncakeGolden.RequestID, v.RequestID},
	} {
		if r[1] != "" {
			s = strings.ReplaceAll(s, r[0], r[1])
		}
	}
	return []byte(s)
}
