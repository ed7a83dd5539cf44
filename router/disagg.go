package router

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
)

// Protocol names how the router splits a request between a prefill and a
// decode instance — which of vLLM's KV connectors' proxy protocols it
// speaks.
type Protocol string

// Protocols.
const (
	// ProtocolNIXL is vLLM's toy proxy's (tests/v1/kv_connector/
	// nixl_integration/toy_proxy_server.py at vLLM commit
	// b36adfa349cfab0e79f3d736d5e5413bd3ee19f5, in 0.18.1): the prefill leg
	// first (:155-190, :220-223), then the decode leg with the
	// kv_transfer_params of the prefill's answer when it has any (:225-230)
	// — NixlConnector, and MooncakeConnector before vLLM PR #31034. An
	// answer without them (a prefill whose one token was EOS finishes other
	// than length-capped, and NixlConnector then returns none:
	// vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py:918-924)
	// sends the decode leg the request as the client sent it, which
	// computes the prompt itself, as the toy proxy does.
	ProtocolNIXL Protocol = "nixl"
	// ProtocolMooncake is vLLM's MooncakeConnector since PR #31034 (vLLM
	// 0.18): its example proxy's bootstrap protocol (mooncake.go): both legs
	// at once, paired by one transfer_id; the decode leg names the
	// producer's bootstrap server and the engine its GET /query gave.
	ProtocolMooncake Protocol = "mooncake"
)

// Protocols lists the valid protocols.
var Protocols = []Protocol{ProtocolNIXL, ProtocolMooncake}

// ParseProtocol validates a protocol name.
func ParseProtocol(s string) (Protocol, error) { return oneOf("kv protocol", s, Protocols) }

// ServerOptions configures a Server. Zero values take defaults.
type ServerOptions struct {
	Protocol Protocol // default ProtocolNIXL
	// BootstrapPorts are, for ProtocolMooncake, the bootstrap server ports
	// of the instances prefills may run on: the producers of a
	// PD-separated router, else (elastic offload) every target, in order.
	// Empty: 8998 for each, vLLM's default (VLLM_MOONCAKE_BOOTSTRAP_PORT).
	BootstrapPorts []int
	// Messages receives the router's progress lines (bootstrap servers
	// found); nil discards them.
	Messages io.Writer
}

func (o ServerOptions) withDefaults() (ServerOptions, error) {
	o.Protocol = cmp.Or(o.Protocol, ProtocolNIXL)
	if _, err := ParseProtocol(string(o.Protocol)); err != nil {
		return o, err
	}
	if o.Protocol != ProtocolMooncake && len(o.BootstrapPorts) > 0 {
		return o, fmt.Errorf("bootstrap ports are for the mooncake protocol, not %s", o.Protocol)
	}
	for _, p := range o.BootstrapPorts {
		if p < 1 || p > 65535 {
			return o, fmt.Errorf("bootstrap port %d is not a port", p)
		}
	}
	o.Messages = cmp.Or(o.Messages, io.Discard)
	return o, nil
}

// prefillBody is the prefill leg of a split request, as both vLLM proxies
// build it: the request with kv_transfer_params, no streaming, max_tokens
// (and max_completion_tokens, when given) 1, no stream_options (toy proxy
// :161-175, Mooncake proxy :256-267), and, unlike them, no min_tokens or
// min_completion_tokens: a prefill cannot honour them with max_tokens 1,
// and vLLM refuses min_tokens > max_tokens (vllm/sampling_params.py:470-474
// at b36adfa3).
func prefillBody(fields map[string]json.RawMessage, params string) ([]byte, error) {
	p := make(map[string]json.RawMessage, len(fields)+1)
	maps.Copy(p, fields)
	p["kv_transfer_params"] = json.RawMessage(params)
	p["stream"] = json.RawMessage("false")
	p["max_tokens"] = json.RawMessage("1")
	if _, ok := p["max_completion_tokens"]; ok {
		p["max_completion_tokens"] = json.RawMessage("1")
	}
	delete(p, "stream_options")
	delete(p, "min_tokens")
	delete(p, "min_completion_tokens")
	return json.Marshal(p)
}

// nixlPrefill runs the prefill leg of ProtocolNIXL on url and returns the
// kv_transfer_params of its answer, which tell the decode instance where the
// KV is (toy proxy :225-230); none (null, {} or absent) when the prefill
// sends no KV.
func (s *Server) nixlPrefill(ctx context.Context, url string, h http.Header, fields map[string]json.RawMessage) (json.RawMessage, int, error) {
	body, err := prefillBody(fields, `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	hh := h.Clone()
	hh.Set("Accept", "application/json")
	out, status, err := s.prefillLeg(ctx, url, hh, body)
	if err != nil {
		return nil, status, err
	}
	var ans struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(out, &ans); err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("router: prefill on %s: its answer is not JSON: %w", url, err)
	}
	switch p := bytes.TrimSpace(ans.KVTransferParams); {
	case len(p) == 0, string(p) == "null", string(bytes.Join(bytes.Fields(p), nil)) == "{}":
		return nil, http.StatusOK, nil
	}
	return ans.KVTransferParams, http.StatusOK, nil
}

// prefillLeg POSTs a prefill leg and returns its answer; a status other
// than 200 is an error carrying that status and the answer.
func (s *Server) prefillLeg(ctx context.Context, url string, h http.Header, body []byte) ([]byte, int, error) {
	resp, err := s.forward(ctx, url, http.MethodPost, h, body)
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("router: prefill on %s: %w", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, http.StatusBadGateway, fmt.Errorf("router: prefill on %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, fmt.Errorf("router: prefill on %s: status %d: %s", url, resp.StatusCode, bytes.TrimSpace(out))
	}
	return out, http.StatusOK, nil
}
