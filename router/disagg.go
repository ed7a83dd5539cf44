package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Protocol names how the router splits a request between a prefill and a
// decode instance — which of vLLM's KV connectors' proxy protocols it
// speaks.
type Protocol string

// Protocols.
const (
	// ProtocolNIXL is vLLM's toy proxy's (tests/v1/kv_connector/
	// nixl_integration/toy_proxy_server.py at commit
	// 030ea52effcb05071543c8c42b8f0145e94cee43): the prefill leg first,
	// then the decode leg with the kv_transfer_params of the prefill's
	// answer (NixlConnector, and MooncakeConnector before vLLM PR #31034).
	ProtocolNIXL Protocol = "nixl"
	// ProtocolMooncake is vLLM's MooncakeConnector since PR #31034 (its
	// example proxy, examples/online_serving/disaggregated_serving/
	// mooncake_connector/mooncake_connector_proxy.py at commit
	// f1b4b2802cde3faa894510acb65beead29f57597): both legs at once, paired
	// by one X-Request-Id; the decode leg names the producer's bootstrap
	// server and engine, learnt from the bootstrap server's GET /query
	// (mooncake.go).
	ProtocolMooncake Protocol = "mooncake"
)

// Protocols lists the valid protocols.
var Protocols = []Protocol{ProtocolNIXL, ProtocolMooncake}

// ParseProtocol validates a protocol name.
func ParseProtocol(s string) (Protocol, error) {
	for _, p := range Protocols {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("kv protocol %q is not one of nixl, mooncake", s)
}

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
	if o.Protocol == "" {
		o.Protocol = ProtocolNIXL
	}
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
	if o.Messages == nil {
		o.Messages = io.Discard
	}
	return o, nil
}

// prefillBody is the prefill leg of a split request, as both vLLM proxies
// build it: the request with kv_transfer_params, no streaming, max_tokens
// (and max_completion_tokens, when given) 1, no stream_options (toy proxy
// :158-167, Mooncake proxy :256-265), and no min_tokens or
// min_completion_tokens (toy proxy :172-174: a P cannot honour them with
// max_tokens 1; vLLM would refuse the request).
func prefillBody(fields map[string]json.RawMessage, params string) ([]byte, error) {
	p := make(map[string]json.RawMessage, len(fields)+1)
	for k, v := range fields {
		p[k] = v
	}
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
// KV is (toy proxy :222-231). Unlike the toy proxy, an answer without them
// is a 502, not a decode that silently recomputes the prompt.
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
	if err := json.Unmarshal(out, &ans); err != nil || len(ans.KVTransferParams) == 0 || string(ans.KVTransferParams) == "null" {
		return nil, http.StatusBadGateway, fmt.Errorf("router: prefill on %s: no kv_transfer_params in its answer "+
			"(is a KV connector configured? a MooncakeConnector of vLLM ≥ PR #31034 answers none: route with --kv-protocol mooncake)", url)
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

// jsonString quotes s as a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
