package simengine

import (
	"errors"
	"fmt"
	"time"
)

// maxLag is how far the loop may fall behind its timeline (a late wake-up)
// and still keep it, by starting the next step at the last step's planned
// end. Further behind, the timeline restarts from now rather than running
// steps back to back to catch up.
const maxLag = 5 * time.Millisecond

// errShutdown fails requests still in flight when the engine stops.
var errShutdown = errors.New("the simulated engine is shutting down")

// loop is the engine: one goroutine that schedules a step, sleeps until the
// step's planned end (absolute deadlines, so oversleeping never accumulates),
// applies it, delivers its tokens and logs it. An idle engine blocks on the
// wake channel and logs nothing.
func (e *Engine) loop() {
	defer close(e.loopDone)
	pt := newPreciseTimer()
	defer pt.close()
	var plan stepPlan
	var start time.Time
	idle := true
	var steps int64
	for {
		e.mu.Lock()
		e.sch.schedule(&plan)
		work := !e.sch.idle()
		e.mu.Unlock()
		if len(plan.seqs) == 0 {
			if e.log != nil {
				e.reportLogErr(e.log.flush())
			}
			if work {
				// Unreachable with validated requests; never spin if it happens.
				if !sleepUntil(time.Now().Add(time.Millisecond), e.stop, pt) {
					return
				}
			} else {
				select {
				case <-e.wake:
				case <-e.stop:
					return
				}
			}
			idle = true
			continue
		}
		// An injected crash strikes when the engine has work after its
		// last allowed step: requests are in flight, as when a real engine
		// dies mid-run.
		if n := int64(e.cfg.CrashAfterSteps); n > 0 && steps >= n {
			e.crash(steps)
			return
		}
		if now := time.Now(); idle || now.Sub(start) > maxLag {
			if !idle {
				e.lateResets.Add(1)
			}
			start = now
		}
		idle = false
		c := e.cost.cost(steps, plan.prefillTokens, plan.decodeSeqs, plan.cachedBlocks, plan.newest)
		deadline := start.Add(usToDuration(c.total))
		if e.log != nil {
			e.reportLogErr(e.log.flushBefore(deadline))
		}
		if !sleepUntil(deadline, e.stop, pt) {
			return
		}
		end := time.Now()
		e.mu.Lock()
		e.sch.complete(&plan)
		e.mu.Unlock()
		steps++
		if e.log != nil {
			e.reportLogErr(e.log.write(stepRecord{
				endWall: end, cost: c, numRunning: plan.numRunning, numWaiting: plan.numWaiting,
				prefillTokens: plan.prefillTokens, decodeTokens: plan.decodeSeqs,
			}))
		}
		start = deadline
	}
}

// CrashError is what Serve returns after an injected crash
// (Config.CrashAfterSteps); `mbench sim` exits with its ExitCode, 3.
type CrashError struct{ Steps int64 }

func (e *CrashError) Error() string {
	return fmt.Sprintf("sim: injected crash after %d steps", e.Steps)
}

// ExitCode is the exit status of a crashed sim process.
func (e *CrashError) ExitCode() int { return 3 }

// crash is the injected fault: flush the step log, say so, end every
// request as a dead engine would, and tell Serve (Crashed), which returns a
// *CrashError.
func (e *Engine) crash(steps int64) {
	e.closeLog()
	fmt.Fprintf(e.stderr, "sim: injected crash after %d steps\n", steps)
	e.mu.Lock()
	e.closed = true
	e.crashSteps = steps
	e.failAllLocked(errors.New("the simulated engine crashed (injected fault)"))
	e.mu.Unlock()
	close(e.crashed)
}

// reportLogErr prints a step-log error; stepLog returns each failure once.
func (e *Engine) reportLogErr(err error) {
	if err != nil {
		fmt.Fprintf(e.stderr, "sim: %v (the step log is incomplete from here)\n", err)
	}
}

func (e *Engine) closeLog() {
	e.logOnce.Do(func() {
		if e.log != nil {
			e.reportLogErr(e.log.close())
		}
	})
}

// failAllLocked ends every request in the engine with err.
func (e *Engine) failAllLocked(err error) {
	for _, list := range [][]*seq{e.sch.running, e.sch.waiting} {
		for _, s := range list {
			s.stream.fail(err)
		}
	}
}
