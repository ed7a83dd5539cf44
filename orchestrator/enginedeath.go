package orchestrator

import (
	"context"
	"net/http"
	"time"
)

// engineDeathWait bounds the wait, after a run, for an engine that no
// longer answers to be reported dead by its monitor: the exit of a remote
// engine is seen when its monitor's report crosses SSH (or, on Slurm, the
// step's), which can come after the load generator, whose requests failed
// the moment the engine died, has finished.
var engineDeathWait = 10 * time.Second

// deadAfterLoad is the process of es that died during the run, judged after
// its monitor has had the chance to say so: one already reported, else,
// for each instance that no longer answers its health endpoint (a
// connection refused or a timeout, not an HTTP status), the first whose
// monitor reports its exit within engineDeathWait. nil when every process
// runs, or when one that does not answer is still not reported dead.
func (es *engineSet) deadAfterLoad(ctx context.Context) *engineProc {
	if p := es.dead(); p != nil {
		return p
	}
	client := &http.Client{Timeout: 2 * time.Second}
	var silent []*engineProc
	for _, p := range es.procs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/health", nil)
		if err != nil {
			continue
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			continue // it answers, whatever it says: alive
		}
		silent = append(silent, p)
	}
	if len(silent) == 0 {
		return nil
	}
	t := time.NewTimer(engineDeathWait)
	defer t.Stop()
	dead := make(chan *engineProc, len(silent))
	stop := make(chan struct{})
	defer close(stop)
	for _, p := range silent {
		go func() {
			select {
			case <-p.proc.Done():
				dead <- p
			case <-stop:
			}
		}()
	}
	select {
	case p := <-dead:
		return p
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}
