package simengine

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAPIKey: with an API key every /v1 request needs "Authorization:
// Bearer <key>" (any case of the scheme) or gets vLLM's 401
// {"error":"Unauthorized"}; /health and /metrics stay open; without a key
// everything is open.
func TestAPIKey(t *testing.T) {
	cfg := fastCfg()
	cfg.APIKey = "k3y"
	te := startEngine(t, cfg)
	open := startEngine(t, fastCfg())
	body := `{"model":"sim-model","prompt":[1,2,3],"max_tokens":2}`
	for _, c := range []struct {
		url, method, path, auth string
		want                    int
	}{
		{te.url, "GET", "/v1/models", "", 401},
		{te.url, "GET", "/v1/models", "Bearer wrong", 401},
		{te.url, "GET", "/v1/models", "Basic k3y", 401},
		{te.url, "GET", "/v1/models", "Bearer k3y", 200},
		{te.url, "GET", "/v1/models", "bearer k3y", 200},
		{te.url, "POST", "/v1/completions", "", 401},
		{te.url, "POST", "/v1/completions", "Bearer k3y", 200},
		{te.url, "GET", "/health", "", 200},
		{te.url, "GET", "/metrics", "", 200},
		{open.url, "POST", "/v1/completions", "", 200},
	} {
		req, _ := http.NewRequest(c.method, c.url+c.path, strings.NewReader(body))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || (c.want == 401 && strings.TrimSpace(string(b)) != `{"error":"Unauthorized"}`) {
			t.Errorf("%s %s (Authorization %q): %d %s, want %d", c.method, c.path, c.auth, resp.StatusCode, b, c.want)
		}
	}
}
