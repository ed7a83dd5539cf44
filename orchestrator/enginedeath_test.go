package orchestrator

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// lateProcess is an engine whose monitor reports its exit only when told
// (report): the engine itself is already gone.
type lateProcess struct {
	done chan struct{}
}

func (p *lateProcess) Pid() int                                  { return 4242 }
func (p *lateProcess) Done() <-chan struct{}                     { return p.done }
func (p *lateProcess) Err() error                                { return nil }
func (p *lateProcess) Stop(context.Context, time.Duration) error { return nil }
func (p *lateProcess) LogTail(context.Context, int) string       { return "" }
func (p *lateProcess) report()                                   { close(p.done) }

// A run whose engine died is judged after the engine's monitor has
// reported: an instance that no longer answers is waited for (on its
// monitor, not a sleep); one that answers, even 503, is alive at once.
func TestDeadAfterLoadWaitsForTheMonitor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there: the engine is gone
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer busy.Close()

	dead := &lateProcess{done: make(chan struct{})}
	p := &engineProc{name: "engine0", url: gone, proc: dead}
	es := &engineSet{procs: []*engineProc{p, {name: "engine1", url: busy.URL, proc: &lateProcess{done: make(chan struct{})}}}}
	got := make(chan *engineProc, 1)
	go func() { got <- es.deadAfterLoad(context.Background()) }()
	select {
	case q := <-got:
		t.Fatalf("judged before the monitor reported: %v", q)
	case <-time.After(50 * time.Millisecond): // it is waiting (a judgement now would be wrong)
	}
	dead.report()
	if q := <-got; q != p {
		t.Fatalf("dead process %v, want engine0", q)
	}

	// Every instance answers: nothing to wait for (logical bound: the
	// wait for a silent one, engineDeathWait, is not taken).
	alive := &engineSet{procs: []*engineProc{{name: "engine1", url: busy.URL, proc: &lateProcess{done: make(chan struct{})}}}}
	start := time.Now()
	if q := alive.deadAfterLoad(context.Background()); q != nil || time.Since(start) >= engineDeathWait {
		t.Errorf("alive set: %v after %v", q, time.Since(start))
	}

	// Silent but never reported dead (unreachable, not exited): the wait is
	// bounded and the run is judged on its requests.
	defer func(d time.Duration) { engineDeathWait = d }(engineDeathWait)
	engineDeathWait = 100 * time.Millisecond
	silent := &engineSet{procs: []*engineProc{{name: "engine0", url: gone, proc: &lateProcess{done: make(chan struct{})}}}}
	if q := silent.deadAfterLoad(context.Background()); q != nil {
		t.Errorf("silent, never reported: %v", q)
	}
}
