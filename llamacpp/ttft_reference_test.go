package llamacpp_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mbench/mbench/openloop"
)

// The reference client of TestTTFTAgainstEngineTimings: the plainest
// measurement of the same TTFT, against which mbench's is held where an
// absolute bound would only measure the machine. It is this test binary
// run again (TestMain, with refClientEnv set to the server's URL) under the
// same nice −20 as mbench, and it sends refRequests requests of 64 random
// token ids asking 16 tokens, 2 per second, each on a connection of its own
// (llama-server closes it after every streamed response), timing each from
// the clock read just before the write of the request to the clock read
// just after the read that brought the first "data: " line. It prints one
// TTFT per line, in ns.

// refClientEnv, set to a server URL, makes the test binary the reference
// client.
const refClientEnv = "MBENCH_TEST_TTFT_REFERENCE"

// ttftMeasured is the measured requests of a batch of mbench's (which sends
// 2 warmup requests before them); refRequests is the reference client's
// batch, as many requests in all.
const (
	ttftMeasured = 28
	refRequests  = ttftMeasured + 2
)

// runRefClient is the reference client's process: it writes the TTFTs to w.
func runRefClient(target string, w io.Writer) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(7, 11))
	start := time.Now()
	for i := range refRequests {
		ids := make([]string, 64)
		for k := range ids {
			ids[k] = strconv.Itoa(openloop.TokenIDMin + rng.IntN(openloop.TokenIDMax-openloop.TokenIDMin))
		}
		body := `{"prompt":[` + strings.Join(ids, ",") + `],"max_tokens":16,"min_tokens":16,"ignore_eos":true,"stream":true}`
		req := "POST /v1/completions HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n" +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		time.Sleep(time.Until(start.Add(time.Duration(i) * 500 * time.Millisecond))) // pacing, 2 req/s
		ttft, err := refRequest(u.Host, []byte(req))
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		fmt.Fprintln(w, ttft.Nanoseconds())
	}
	return nil
}

// refRequest sends req on a new connection to addr and reads the response
// to its end; it returns the time from the write to the first data line.
func refRequest(addr string, req []byte) (time.Duration, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	var got []byte
	var ttft time.Duration
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		t := time.Since(t0)
		got = append(got, buf[:n]...)
		if ttft == 0 && bytes.Contains(got, []byte("data: ")) {
			ttft = t
		}
		if bytes.Contains(got, []byte("data: [DONE]")) || err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) || ttft == 0 {
		return 0, fmt.Errorf("response %.200q", got)
	}
	return ttft, nil
}

// refGap runs the reference client against srv (at nice −20) and returns
// the median of its TTFT minus the prompt evaluation time the server logged
// for each request, in ms.
func refGap(t testing.TB, srv *llamaServer) float64 {
	t.Helper()
	logBefore, _ := os.ReadFile(srv.LogPath)
	cmd := exec.Command("nice", "-n", "-20", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), refClientEnv+"="+srv.URL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference client: %v\n%s", err, stderr.String())
	}
	timings := srv.TimingsAfter(len(logBefore), refRequests)
	lines := strings.Fields(string(out))
	if len(lines) != refRequests || len(timings) != refRequests {
		t.Fatalf("reference client: %d TTFTs, %d timings in the log, want %d", len(lines), len(timings), refRequests)
	}
	gaps := make([]float64, len(lines))
	for i, l := range lines {
		ns, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			t.Fatalf("reference client: line %q", l)
		}
		if tm := timings[i]; tm.Evals != 16 || tm.PromptTokens == 0 {
			t.Fatalf("reference request %d: the log says %d prompt tokens evaluated and %d generated, want 16 generated", i, tm.PromptTokens, tm.Evals)
		}
		gaps[i] = float64(ns)/1e6 - timings[i].PromptMs
	}
	return median(gaps)
}
