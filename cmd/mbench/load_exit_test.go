package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop/stub"
)

// TestLoadExitStatus: `mbench load` exits by the run's outcome against
// servers that fail in each way, and its summary counts the failures by
// error class, one key per class.
func TestLoadExitStatus(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	cases := []struct {
		name  string
		fault *stub.Fault // nil: no server (dead port)
		extra []string
		code  int
		class string
	}{
		{"healthy", &stub.Fault{}, nil, 0, ""},
		{"500", &stub.Fault{Status: 500, Body: "boom"}, nil, exitNoResult, "http_5xx"},
		{"429", &stub.Fault{Status: 429, Body: "slow down"}, nil, exitNoResult, "http_429"},
		{"context length", &stub.Fault{Status: 400, Body: `{"message":"maximum context length is 8 tokens"}`}, nil, exitNoResult, "context_length"},
		{"malformed SSE", &stub.Fault{Malformed: true}, nil, exitNoResult, "malformed_stream"},
		{"closed mid-stream", &stub.Fault{Break: true, BreakAfter: 1}, nil, exitNoResult, "connection_reset"},
		{"hang", &stub.Fault{Hang: true}, []string{"--request-timeout", "200ms"}, exitNoResult, "timeout"},
		{"hang, drain timeout", &stub.Fault{Hang: true}, []string{"--drain-timeout", "200ms", "--max-failed", "1"}, exitNoResult, "drained"},
		{"dead port", nil, nil, exitError, ""},
		{"dead port, no model", nil, []string{"--model", ""}, exitError, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url := dead
			if c.fault != nil {
				f := *c.fault
				srv, err := stub.Start(stub.Options{Tokens: 3, Fault: func(int64, string) stub.Fault { return f }})
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				url = srv.URL
			}
			out := filepath.Join(t.TempDir(), "load")
			args := append([]string{"load", "--url", url, "--rate", "100", "--input", "8", "--output", "3",
				"--requests", "20", "--model", "stub-model", "--out", out}, c.extra...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, stderr, err := runCLI(t, ctx, args...)
			if c.code == 0 {
				err = ranToEnd(t, err, out)
			}
			if got := exitStatus(err); got != c.code {
				t.Fatalf("exit %d (%v), want %d\n%s", got, err, c.code, stderr)
			}
			if c.class == "" && c.code != 0 {
				return // the run never started: no summary
			}
			data, err := os.ReadFile(filepath.Join(out, "summary_A.json"))
			if err != nil {
				t.Fatal(err)
			}
			var s struct {
				Errors map[string]int `json:"errors"`
			}
			if err := json.Unmarshal(data, &s); err != nil {
				t.Fatal(err)
			}
			want := map[string]int{}
			if c.class != "" {
				want[c.class] = 20
			}
			if len(s.Errors) != len(want) || s.Errors[c.class] != want[c.class] {
				t.Errorf("errors %v, want %v", s.Errors, want)
			}
		})
	}
}

func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	return exitCode(err)
}

// TestRateFlagsRefused: a rate that is not a finite number > 0 is a usage
// error (exit 2) naming the flag, in every command that takes a rate —
// except mbench load's +Inf with --requests, the burst (vllm bench serve's
// --request-rate inf), which without a request count is refused too.
func TestRateFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, rate := range []string{"Inf", "+Inf", "-Inf", "NaN", "0", "-1"} {
		stop := []string{"--requests", "1"}
		if strings.HasPrefix(rate, "Inf") || strings.HasPrefix(rate, "+Inf") {
			stop = []string{"--duration", "1s"} // a burst needs --requests
		}
		for _, args := range [][]string{
			append([]string{"load", "--url", "http://127.0.0.1:1", "--rate", rate, "--input", "1", "--output", "1", "--out", t.TempDir()}, stop...),
			{"bench-load", "--rates", "100," + rate},
		} {
			_, _, err := runCLI(t, context.Background(), args...)
			if exitStatus(err) != 2 || err == nil || !strings.Contains(err.Error(), "rate") {
				t.Errorf("%v: err %v (exit %d), want exit 2 naming the rate", args, err, exitStatus(err))
			}
		}
	}
}
