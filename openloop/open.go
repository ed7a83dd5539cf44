package openloop

// What the open loop sends: the builder prepares each request (its phase,
// prompt and body) ahead of its send time, for the dispatcher (attack.go);
// the cache fill runs before it.

// buildOpen prepares the open-loop requests ahead of their send times: the
// schedule offset (none when sch is nil: the closed loop), the prompt and
// the encoded body. It stops when the run
// stops sending or when a stop condition that depends only on the schedule
// (Requests, Duration) is met; then it records the reason and closes jobs.
// Requests go out in batches of up to jobBatch, so that the builder, which
// runs ahead until jobs is full, wakes once a batch rather than once a
// request; a batch goes out short when jobs is empty (its reader waits).
func (r *runner) buildOpen(sch *Schedule, base int64, jobs chan<- []*job) {
	var batch []*job
	defer func() {
		if len(batch) > 0 && !r.stopped.Load() {
			select {
			case jobs <- batch:
			case <-r.stopCh:
			}
		}
		close(jobs)
	}()
	// hand gives the batch to the dispatcher; false: the run stopped.
	hand := func() bool {
		select {
		case jobs <- batch:
			batch = make([]*job, 0, jobBatch)
			return true
		case <-r.stopCh:
			batch = nil
			return false
		}
	}
	cfg := &r.cfg
	var toks []int32
	var body []byte // the request body's scratch (see prepare)
	ph := newPhaser(cfg, sch != nil)
	for i := 0; ; i++ {
		off := int64(0) // a closed loop (no schedule) sets the time as it sends
		if sch != nil {
			off = sch.Next()
		}
		phase, ramp, stop := ph.next(i, off)
		if stop != "" {
			r.endReason = stop
			return
		}
		if i == cfg.Warmup && i > 0 && cfg.Arrival.Ramp == nil {
			// The warm-up requests finish before the next one is sent, as
			// vllm bench serve gathers its warm-ups before it starts
			// (vllm/benchmarks/serve.py at vLLM commit b36adfa3 (in 0.18.1), lines
			// 706–725): so the measured window — and the engine counters
			// snapshotted as it opens (Config.OnPhase) — holds none of
			// their work. The schedule resumes from that moment, shifted
			// whole: its gaps are the process's own. A rate ramp runs on
			// without the wait: it is one schedule from its start, and
			// its own requests (phase ramp) are in flight as the measured
			// phase begins anyway.
			if len(batch) > 0 && !hand() {
				return
			}
			select {
			case <-r.warmDone:
			case <-r.stopCh:
				return
			}
			base = r.clk.now() + int64(openLead) - off
			if sch == nil { // a closed loop: no slot is due before now
				base = r.clk.now()
			}
		}
		j := r.prepareOpen(i, phase, base+off, &toks, &body)
		j.ramp = ramp
		batch = append(batch, j)
		if len(batch) < jobBatch && len(jobs) > 0 {
			continue
		}
		if !hand() {
			return
		}
	}
}

// prepareOpen prepares the i-th request of the open loop (or the closed
// loop), due at sched: its prompt, from the dataset or the shape's tokens,
// and its encoded body; toks and body are the caller's scratch.
func (r *runner) prepareOpen(i int, phase string, sched int64, toks *[]int32, body *[]byte) *job {
	if r.gen.items != nil {
		prompt, out := r.gen.dataset(i)
		return r.prepareText(&job{id: r.fillCount + i, phase: phase, sched: sched, output: out}, prompt, body)
	}
	var out, group int
	*toks, out, group = r.gen.open(i, *toks)
	return r.prepare(&job{id: r.fillCount + i, phase: phase, sched: sched, output: out, group: group}, *toks, body)
}

// phaser says which phase each request of the schedule is in — warmup,
// ramp (sent while Arrival.Ramp raises the rate, unless IncludeRamp) or
// measure — and which stop condition that depends only on the schedule
// (Requests, Duration) is met before it.
type phaser struct {
	cfg           *Config
	scheduled     bool  // offsets come from a Schedule (not the closed loop)
	rampEnd       int64 // requests scheduled before it are ramp requests
	firstMeasured int64 // offset of the first measured request (-1: none yet)
	measured      int
}

func newPhaser(cfg *Config, scheduled bool) *phaser {
	p := &phaser{cfg: cfg, scheduled: scheduled, rampEnd: -1, firstMeasured: -1}
	if rp := cfg.Arrival.Ramp; rp != nil && scheduled {
		p.rampEnd = int64(rp.Duration)
	}
	return p
}

// next is the phase of request i at offset off, whether it is sent during
// the ramp, and the stop condition met instead of sending it ("": none).
func (p *phaser) next(i int, off int64) (phase string, ramp bool, stop string) {
	cfg := p.cfg
	ramp = off < p.rampEnd
	phase = PhaseWarmup
	switch {
	case i < cfg.Warmup:
	case ramp && !cfg.IncludeRamp:
		phase = PhaseRamp
	default:
		phase = PhaseMeasure
		if cfg.Requests > 0 && p.measured >= cfg.Requests {
			return phase, ramp, "requests"
		}
		p.measured++
	}
	if phase == PhaseMeasure && cfg.Duration > 0 && p.scheduled {
		if p.firstMeasured < 0 {
			p.firstMeasured = off
		}
		if off-p.firstMeasured >= int64(cfg.Duration) {
			return phase, ramp, "duration"
		}
	}
	return phase, ramp, ""
}

// jobBatch is the most prepared requests handed over at once.
const jobBatch = 64

// runFill sends the cache-fill requests, fillConcurrency at a time, and waits
// for all of them. They are closed-loop: scheduled when sent.
func (r *runner) runFill() {
	f := r.cfg.Shape.CacheFill
	if f == nil || f.Prefixes == 0 || r.cfg.Shape.Trace != nil {
		return
	}
	r.fillCount = f.Prefixes
	r.setPhase(PhaseFill)
	sem := make(chan struct{}, fillConcurrency)
	var toks []int32
	var body []byte
	for k := 0; k < f.Prefixes; k++ {
		acquired := false
		select {
		case sem <- struct{}{}:
			acquired = true
		case <-r.stopCh:
		}
		if r.stopped.Load() {
			if acquired {
				<-sem
			}
			break
		}
		toks = r.gen.fill(k, toks)
		j := r.prepare(&job{id: k, phase: PhaseFill, sched: r.clk.now(), output: 1}, toks, &body)
		r.launch(j, func() { <-sem })
	}
	for range fillConcurrency {
		sem <- struct{}{}
	}
}
