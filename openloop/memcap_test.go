package openloop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// loadChildEnv makes the test binary run one load (a loadChildSpec, as
// JSON) and print what it measured of itself (memChildReport): see
// TestMain.
const loadChildEnv = "MBENCH_TEST_LOAD_CHILD"

// loadChildSpec is the load a child runs.
type loadChildSpec struct {
	URL      string
	Rate     float64
	Requests int
}

// memChildReport is what a load child prints.
type memChildReport struct {
	Records, OK, TooLarge int
	PeakRSSMiB            float64 // VmHWM over the run
	PeakHeldMiB           float64 // the stream budget's peak
}

// runLoadChild runs cfg in this process and prints a memChildReport.
func runLoadChild(spec string) error {
	var sp loadChildSpec
	if err := json.Unmarshal([]byte(spec), &sp); err != nil {
		return err
	}
	cfg := Config{Targets: []string{sp.URL}, Model: "m", Rate: sp.Rate, Shape: Shape{Input: 8, Output: 1},
		Requests: sp.Requests, Seed: 1, RequestTimeout: 60 * time.Second}
	if err := cfg.Validate(); err != nil {
		return err
	}
	r := newRunner(cfg, defaultWaitMode)
	res, err := r.run(context.Background())
	if err != nil {
		return err
	}
	rep := memChildReport{Records: len(res.Records), PeakHeldMiB: float64(r.cl.budget.peak.Load()) / (1 << 20)}
	for _, rec := range res.Records {
		switch {
		case rec.OK():
			rep.OK++
		case rec.ErrorClass == ErrClassStreamTooLarge:
			rep.TooLarge++
		}
	}
	if rep.PeakRSSMiB, err = peakRSSMiB(); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// peakRSSMiB is this process's peak resident set (VmHWM), MiB.
func peakRSSMiB() (float64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}

// TestStreamCapBoundsRSS: a server sends each request one 15 MB SSE line,
// at 50 req/s; the load generator runs in a process of its own under the
// default 256 MiB stream cap. The cap bounds the process, not only the
// bytes it counts: its peak RSS stays under the cap plus 96 MiB (the
// binary, the runtime and everything else), and requests beyond the cap
// fail as stream_too_large rather than grow the process.
func TestStreamCapBoundsRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 1.5 GB")
	}
	line := []byte("data: {\"choices\":[{\"text\":\"" + strings.Repeat("x", 15_000_000) + "\"}]}\n\n")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(line)
		_, _ = w.Write([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc/self/status")
	}
	spec, _ := json.Marshal(loadChildSpec{URL: "http://" + ln.Addr().String(), Rate: 50, Requests: 75})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), loadChildEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("load child: %v", err)
	}
	var rep memChildReport
	if err := json.NewDecoder(bufio.NewReader(strings.NewReader(string(out)))).Decode(&rep); err != nil {
		t.Fatalf("load child said %q: %v", out, err)
	}
	t.Logf("15 MB lines at 50 req/s, cap %d MiB: %d requests, %d ok, %d stream_too_large; budget peak %.0f MiB, process peak RSS %.0f MiB",
		DefaultStreamMemory>>20, rep.Records, rep.OK, rep.TooLarge, rep.PeakHeldMiB, rep.PeakRSSMiB)
	if rep.Records != 75 || rep.OK+rep.TooLarge != 75 || rep.OK == 0 {
		t.Errorf("%+v: want 75 requests, each ok or stream_too_large, some ok", rep)
	}
	if limit := float64(DefaultStreamMemory>>20) + 96; rep.PeakRSSMiB > limit {
		t.Errorf("peak RSS %.0f MiB over the %d MiB cap + 96 MiB", rep.PeakRSSMiB, DefaultStreamMemory>>20)
	}
}
