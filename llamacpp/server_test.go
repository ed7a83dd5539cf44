package llamacpp_test

// This file runs llama.cpp's llama-server for the tests: it finds the
// binary that build-llama-server.sh built (or $MBENCH_LLAMA_SERVER),
// writes a random-weight model, starts the server on a port the kernel
// picks, waits for it to answer /health with 200, and stops it when the
// test ends. A test that needs llama-server and finds none is skipped, or
// fails where MBENCH_REQUIRE_LLAMA_SERVER=1 (CI).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mbench/mbench/llamacpp"
)

// serverVersion is the node-llama-cpp version build-llama-server.sh builds by
// default, the cache directory findServer looks in.
const serverVersion = "3.21.1"

// findServer returns the path of llama-server: $MBENCH_LLAMA_SERVER, else the
// build cache of llamacpp/build-llama-server.sh
// ($MBENCH_LLAMA_CACHE or ~/.cache/mbench/llama-server)/serverVersion/bin.
func findServer(t testing.TB) string {
	t.Helper()
	p := os.Getenv("MBENCH_LLAMA_SERVER")
	if p == "" {
		root := os.Getenv("MBENCH_LLAMA_CACHE")
		if root == "" {
			cache := os.Getenv("XDG_CACHE_HOME")
			if cache == "" {
				home, _ := os.UserHomeDir()
				cache = filepath.Join(home, ".cache")
			}
			root = filepath.Join(cache, "mbench", "llama-server")
		}
		p = filepath.Join(root, serverVersion, "bin", "llama-server")
	}
	if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
		return p
	}
	if os.Getenv("MBENCH_REQUIRE_LLAMA_SERVER") == "1" {
		t.Fatalf("no llama-server at %s and MBENCH_REQUIRE_LLAMA_SERVER=1 (run llamacpp/build-llama-server.sh)", p)
	}
	t.Skipf("no llama-server at %s (run llamacpp/build-llama-server.sh, or set MBENCH_REQUIRE_LLAMA_SERVER=1 to fail instead)", p)
	return ""
}

var models sync.Map // llamacpp.Model → path (written once per test process)

// writeModel writes m as a GGUF file once per test process and returns its path
// (in a directory removed when the process's tests end, see removeModels).
func writeModel(t testing.TB, m llamacpp.Model) string {
	t.Helper()
	if p, ok := models.Load(m); ok {
		return p.(string)
	}
	dir, err := modelDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, fmt.Sprintf("model-%d.gguf", time.Now().UnixNano()))
	if err := m.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	actual, _ := models.LoadOrStore(m, p)
	return actual.(string)
}

var (
	dirOnce sync.Once
	dirPath string
	dirErr  error
)

func modelDir() (string, error) {
	dirOnce.Do(func() { dirPath, dirErr = os.MkdirTemp("", "llamacpptest-") })
	return dirPath, dirErr
}

// removeModels removes the models writeModel wrote; call it from TestMain after the
// tests ran.
func removeModels() {
	if dirPath != "" {
		os.RemoveAll(dirPath)
	}
}

// llamaServer is one running llama-server.
type llamaServer struct {
	URL     string // http://127.0.0.1:PORT
	LogPath string // its stdout and stderr
	cmd     *exec.Cmd
	done    chan struct{}
}

// listenRE is llama-server's line once the model is loaded and the port
// bound (tools/server/server.cpp:515 at 80fb11a: "listening on %s").
var listenRE = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

// startServer runs bin -m model --host 127.0.0.1 --port 0 --metrics --no-webui
// args..., waits until it says where it listens and /health answers 200,
// and stops it (SIGTERM, then SIGKILL) when the test ends.
func startServer(t testing.TB, bin, model string, args ...string) *llamaServer {
	t.Helper()
	return startServerWith(t, serverOptions{}, bin, model, args...)
}

// serverOptions change how startServer runs the server.
type serverOptions struct {
	// Nice runs the server under nice -n Nice: a negative value (as root)
	// favours it over the other processes of a shared machine, for checks
	// of its timings against a client's that other tenants' scheduling
	// delays would blur. Without the privilege it runs at the usual
	// priority.
	Nice int
}

// startServerWith is startServer with options.
func startServerWith(t testing.TB, o serverOptions, bin, model string, args ...string) *llamaServer {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "llama-server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"-m", model, "--host", "127.0.0.1", "--port", "0", "--metrics", "--no-webui"}, args...)
	cmd := exec.Command(bin, argv...)
	if o.Nice != 0 {
		cmd = exec.Command("nice", append([]string{"-n", strconv.Itoa(o.Nice), bin}, argv...)...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the test binary
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &llamaServer{LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(s.done) }()
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(2 * time.Minute)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		select {
		case <-s.done:
			t.Fatalf("llama-server exited while starting (%v):\n%s", cmd.ProcessState, s.LogTail(30))
		default:
		}
		if s.URL == "" {
			if b, _ := os.ReadFile(logPath); listenRE.Match(b) {
				s.URL = string(listenRE.FindSubmatch(b)[1])
			}
		}
		if s.URL != "" && healthy(s.URL) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("llama-server not ready after 2 minutes:\n%s", s.LogTail(30))
		}
		time.Sleep(wait)
	}
}

func healthy(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Stop ends the server: SIGTERM, and SIGKILL after 10 s.
func (s *llamaServer) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// LogTail is the last n lines of the server's log.
func (s *llamaServer) LogTail(n int) string {
	b, _ := os.ReadFile(s.LogPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// timing is one request's timings as llama-server logs them when the slot
// releases it (tools/server/server-context.cpp:632-651 at 80fb11a,
// print_timings): the prompt evaluation and the generation, in ms, with
// their token counts.
type timing struct {
	Task                int
	PromptMs, EvalMs    float64
	PromptTokens, Evals int
}

var (
	promptRE = regexp.MustCompile(`task (\d+) \| prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens`)
	evalRE   = regexp.MustCompile(`task (\d+) \|\s+eval time =\s+([\d.]+) ms /\s+(\d+) tokens`)
)

// TimingsAfter returns the timings of the requests s's log gained past its
// first offset bytes, once it holds n of them: the server writes a
// request's timings after the response's last chunk, so a client that has
// read every response may read the log before its last lines. If the log
// never holds n, it returns what it holds after a minute (a hang guard).
func (s *llamaServer) TimingsAfter(offset, n int) []timing {
	end := time.Now().Add(time.Minute)
	for {
		log, _ := os.ReadFile(s.LogPath)
		tm := parseTimings(log[min(offset, len(log)):])
		if len(tm) >= n || time.Now().After(end) {
			return tm
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// parseTimings parses every request's timings from a llama-server log.
func parseTimings(log []byte) []timing {
	byTask := map[string]*timing{}
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := promptRE.FindStringSubmatch(line); m != nil {
			var tm timing
			fmt.Sscan(m[1], &tm.Task)
			fmt.Sscan(m[2], &tm.PromptMs)
			fmt.Sscan(m[3], &tm.PromptTokens)
			byTask[m[1]] = &tm
			order = append(order, m[1])
		} else if m := evalRE.FindStringSubmatch(line); m != nil {
			if tm := byTask[m[1]]; tm != nil {
				fmt.Sscan(m[2], &tm.EvalMs)
				fmt.Sscan(m[3], &tm.Evals)
			}
		}
	}
	out := make([]timing, 0, len(order))
	for _, k := range order {
		out = append(out, *byTask[k])
	}
	return out
}
