package conformance

import (
	"encoding/json"
	"strconv"
	"testing"
)

// TestMooncakeGoldenConsistent: the golden bodies agree with each other as
// the release's proxy builds them: one transfer_id on both legs, "xfer-" +
// the request id both legs send as X-Request-Id; the decode leg names the
// engine /query gave for DP rank 0, and no DP rank; /query is keyed by
// integer DP ranks.
func TestMooncakeGoldenConsistent(t *testing.T) {
	read := func(name string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal(MooncakeBody(name, Mooncake{}), &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m
	}
	if m := read(MooncakeQueryUnregistered); len(m) != 0 {
		t.Errorf("unregistered /query: %v, want {}", m)
	}
	q := read(MooncakeQueryRegistered)
	for k := range q {
		if _, err := strconv.Atoi(k); err != nil {
			t.Errorf("/query key %q is not a DP rank", k)
		}
	}
	engine := q["0"].(map[string]any)["engine_id"]
	p, d := read(MooncakePrefillParams), read(MooncakeDecodeParams)
	ph, dh := read(MooncakePrefillHeaders), read(MooncakeDecodeHeaders)
	xfer := "xfer-" + MooncakeGolden.RequestID
	if p["transfer_id"] != xfer || d["transfer_id"] != xfer || ph["X-Request-Id"] != MooncakeGolden.RequestID || dh["X-Request-Id"] != MooncakeGolden.RequestID {
		t.Errorf("legs do not share one transfer id: %v %v %v %v", p, d, ph, dh)
	}
	if d["remote_engine_id"] != engine || d["remote_bootstrap_addr"] != MooncakeGolden.BootstrapAddr {
		t.Errorf("decode leg %v does not name /query's engine %v at %s", d, engine, MooncakeGolden.BootstrapAddr)
	}
	if _, ok := d["remote_dp_rank"]; ok {
		t.Errorf("decode leg carries remote_dp_rank: %v", d)
	}
	got := string(MooncakeBody(MooncakeDecodeParams, Mooncake{EngineID: "e", BootstrapAddr: "http://h:1", RequestID: "r"}))
	if want := `{"do_remote_decode":false,"do_remote_prefill":true,"remote_bootstrap_addr":"http://h:1","remote_engine_id":"e","transfer_id":"xfer-r"}`; got != want {
		t.Errorf("substituted decode params\n got %s\nwant %s", got, want)
	}
}
