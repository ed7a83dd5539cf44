package router

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/mbench/mbench/simengine"
	"github.com/mbench/mbench/simengine/simtest"
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
