package router

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/mbench/mbench/internal/simtest"
	"github.com/mbench/mbench/simengine"
)

// deadURL is a loopback URL nothing listens on (a port the kernel gave and
// took back).
func deadURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProxyFailures: an unreachable instance is a 502, a producer that
// cannot hand KV over is its own 400 passed on with the reason, a body that
// is not a completion is a 400 — each logged with its status, and the
// router's load accounting back to zero afterwards.
func TestProxyFailures(t *testing.T) {
	url, log := startRouter(t, []string{deadURL(t)}, nil, Options{Policy: Sticky})
	if status, body := post(t, url, `{"prompt": [1, 2, 3], "max_tokens": 2}`); status != http.StatusBadGateway {
		t.Errorf("dead instance: %d %s", status, body)
	}
	if status, body := post(t, url, `{"prompt": {"a": 1}}`); status != http.StatusBadRequest || !strings.Contains(body, "prompt") {
		t.Errorf("bad prompt: %d %s", status, body)
	}
	plain := simtest.Start(t, fastSim()) // no KV connector: refuses do_remote_decode
	cons := simtest.Start(t, kvSim(simengine.KVRoleConsumer))
	pdURL, pdLog := startRouter(t, []string{cons}, []string{plain}, Options{Policy: Sticky})
	status, body := post(t, pdURL, `{"prompt": [1, 2, 3], "max_tokens": 2}`)
	if status != http.StatusBadRequest || !strings.Contains(body, "no KV connector") {
		t.Errorf("producer without a connector: %d %s", status, body)
	}
	for _, l := range []*Log{log, pdLog} {
		for _, e := range l.Entries() {
			if e.Status == http.StatusOK || e.Error == "" {
				t.Errorf("failed request logged as %d %q", e.Status, e.Error)
			}
		}
	}
	for _, u := range []string{url, pdURL} {
		resp, err := http.Get(u + "/breakdown")
		if err != nil {
			t.Fatal(err)
		}
		var bd Breakdown
		err = json.NewDecoder(resp.Body).Decode(&bd)
		resp.Body.Close()
		if err != nil || bd.Failed != bd.Requests || slices.Max(bd.InFlight) != 0 || bd.Offloads != 0 {
			t.Errorf("%s breakdown after failures: %+v (%v)", u, bd, err)
		}
	}
	if n := len(log.Entries()) + len(pdLog.Entries()); n != 2 {
		t.Errorf("%d entries logged, want 2 (a request refused before routing is not routed)", n)
	}
}

// TestChatRouted: chat completions are routed like completions — a session
// stays on its instance, the second turn of a conversation is estimated to
// hit the first turn's prefix, and every request is logged; through a PD
// split the prefill leg goes to the producer's chat endpoint.
func TestChatRouted(t *testing.T) {
	sims := []string{simtest.Start(t, fastSim()), simtest.Start(t, fastSim()), simtest.Start(t, fastSim())}
	url, log := startRouter(t, sims, nil, Options{Policy: Sticky})
	turn1 := `{"role": "user", "content": "` + strings.Repeat("alpha beta gamma delta ", 40) + `"}`
	turn2 := `{"role": "assistant", "content": [{"type": "text", "text": "ok then"}]}, {"role": "user", "content": "more please"}`
	chat := func(u, msgs string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, u+"/v1/chat/completions",
			strings.NewReader(`{"messages": [`+msgs+`], "max_tokens": 3, "stream": true}`))
		req.Header.Set("X-Mbench-Session", "conv")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, msgs := range []string{turn1, turn1 + ", " + turn2} {
		if status, body := chat(url, msgs); status != http.StatusOK || !strings.Contains(body, "chat.completion.chunk") {
			t.Fatalf("chat through the router: %d %s", status, body)
		}
	}
	es := waitEntries(t, log, 2)
	if es[0].Instance != es[1].Instance || es[1].Reason != "sticky" {
		t.Errorf("the conversation's turns went to %d then %d (%s)", es[0].Instance, es[1].Instance, es[1].Reason)
	}
	if es[1].CachedTokens < 16*(es[0].PromptTokens/16)-16 || es[1].CachedTokens == 0 {
		t.Errorf("second turn: %d of %d tokens estimated cached, want about the first turn's %d", es[1].CachedTokens, es[1].PromptTokens, es[0].PromptTokens)
	}
	prod, cons := simtest.Start(t, kvSim(simengine.KVRoleProducer)), simtest.Start(t, kvSim(simengine.KVRoleConsumer))
	pdURL, pdLog := startRouter(t, []string{cons}, []string{prod}, Options{Policy: Sticky})
	if status, body := chat(pdURL, turn1); status != http.StatusOK || !strings.Contains(body, "chat.completion.chunk") {
		t.Fatalf("chat through a PD split: %d %s", status, body)
	}
	if e := waitEntries(t, pdLog, 1)[0]; e.Split != "pd" || e.PrefillInstance != 1 || e.PrefillMs <= 0 {
		t.Errorf("PD chat entry %+v", e)
	}
}
