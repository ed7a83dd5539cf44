package simengine

import (
	"math"
	"math/rand/v2"
	"time"
)

// Shares of the (factored) fixed step cost StepBaseUs that the model assigns
// to the CPU-side scheduler and to the output update; the rest of the step's
// model cost is execution.
const (
	scheduleShare = 0.05
	updateShare   = 0.05
)

// stepCost is one step's modelled duration and its decomposition, in µs.
// With a connector, build_meta and get_finished are part of the step; in
// async mode execute is the part of execution not hidden behind the CPU side
// (the wait for the model output), so the parts always add up to total.
type stepCost struct {
	total, schedule, buildMeta, execute, update, getFinished float64
	connector                                                bool
	factor                                                   float64 // launch × jitter × cold
}

// costModel turns a step's batch into time. It is used by the loop
// goroutine only.
type costModel struct {
	cfg          Config
	launchFactor float64
	jitter       *rand.Rand
}

func newCostModel(cfg Config) *costModel {
	launch := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6c61756e6368)) // "launch"
	return &costModel{
		cfg:          cfg,
		launchFactor: math.Exp(cfg.Noise * launch.NormFloat64()),
		jitter:       rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6a6974746572)), // "jitter"
	}
}

// cost models step number step (0-based since launch) of a batch with
// prefill prefill tokens and decode decoding sequences while cached blocks
// sit in the prefix cache; newest is the serial (1-based since launch) of
// the batch's newest request, which the drift counts.
func (m *costModel) cost(step int64, prefill, decode, cached int, newest uint64) stepCost {
	c := &m.cfg
	f := m.launchFactor
	if c.Jitter > 0 {
		f *= math.Exp(c.Jitter * m.jitter.NormFloat64())
	}
	if step < int64(c.ColdSteps) {
		f *= c.ColdFactor
	}
	if c.DriftPerRequest > 0 && newest > 0 {
		f *= math.Pow(1+c.DriftPerRequest, float64(newest-1))
	}
	model := (c.StepBaseUs + c.PrefillTokenUs*float64(prefill) + c.DecodeSeqUs*float64(decode)) * f
	sc := stepCost{factor: f}
	sc.schedule = scheduleShare * c.StepBaseUs * f
	sc.update = updateShare * c.StepBaseUs * f
	exec := model - sc.schedule - sc.update
	switch c.Connector {
	case ConnectorConstant:
		sc.connector = true
		sc.buildMeta, sc.getFinished = c.ConnectorUs/2, c.ConnectorUs/2
	case ConnectorWalk:
		sc.connector = true
		sc.buildMeta = c.ConnectorUs/2 + c.WalkNsPerBlock*float64(cached)/1000
		sc.getFinished = c.ConnectorUs / 2
	}
	cpu := sc.schedule + sc.buildMeta
	sc.execute = exec
	if c.Async {
		sc.execute = max(exec-cpu, 0)
	}
	sc.total = cpu + sc.execute + sc.update + sc.getFinished
	return sc
}

func usToDuration(us float64) time.Duration { return time.Duration(math.Round(us * 1e3)) }

// coarseMargin is how far before a deadline the loop stops waiting on a Go
// timer (about 1 ms granular on Linux, but interruptible by stop) and
// finishes with the precise timer.
const coarseMargin = 2 * time.Millisecond

// sleepUntil sleeps until deadline without spinning; it returns false when
// stop closes first.
func sleepUntil(deadline time.Time, stop <-chan struct{}, pt *preciseTimer) bool {
	for {
		rem := time.Until(deadline)
		if rem <= 0 {
			return true
		}
		if rem > coarseMargin+time.Millisecond {
			t := time.NewTimer(rem - coarseMargin)
			select {
			case <-stop:
				t.Stop()
				return false
			case <-t.C:
			}
			continue
		}
		select {
		case <-stop:
			return false
		default:
		}
		pt.sleep(rem)
	}
}
