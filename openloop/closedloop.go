package openloop

import (
	"math"
	"sort"
)

// runClosed is the closed-loop dispatcher (Arrival.Process concurrency): it
// keeps Arrival.InFlight requests in flight, sending the next prepared
// request as soon as one finishes. A request's ScheduledNs is when its slot
// freed (the run's start for the first InFlight), so SentNs − ScheduledNs
// is still the generator's own delay. Warmup, the stop conditions (Requests
// and Duration on the scheduled times, MinCompleted, Timeout) and the drain
// are those of the open loop.
func (r *runner) runClosed() {
	n := r.cfg.Arrival.InFlight
	jobs := make(chan []*job, n/jobBatch+2)
	go r.buildOpen(nil, 0, jobs)
	free := make(chan int64, n) // slot-free times; never more than n outstanding
	start := r.clk.now()
	for range n {
		free <- start
	}
	firstMeasured := int64(-1)
	// send sends j when a slot frees; false: the run stopped sending.
	send := func(j *job) bool {
		var t int64
		select {
		case t = <-free:
		case <-r.stopCh:
			return false
		}
		if r.stopped.Load() {
			return false
		}
		if j.phase == PhaseMeasure {
			if firstMeasured < 0 {
				firstMeasured = t
			}
			if d := r.cfg.Duration; d > 0 && t-firstMeasured >= int64(d) {
				r.stop("duration")
				return false
			}
			r.enterMeasure()
		}
		// A job built after the warm-up drained carries that time
		// (buildOpen): a slot freed before it is due only then.
		j.sched = max(t, j.sched)
		r.launch(j, func() { free <- r.clk.now() })
		return true
	}
	for batch := range jobs {
		for _, j := range batch {
			if !send(j) {
				return
			}
		}
	}
	r.stop(r.endReason)
}

// closedRate is the rate a closed loop sent its measured requests at:
// (sends − 1) over the span of their scheduled times, in req/s (0 with
// fewer than two).
func closedRate(recs []Record) float64 {
	first, last, n := int64(math.MaxInt64), int64(0), 0
	for i := range recs {
		if recs[i].Phase != PhaseMeasure {
			continue
		}
		n++
		first, last = min(first, recs[i].ScheduledNs), max(last, recs[i].ScheduledNs)
	}
	if n < 2 || last <= first {
		return 0
	}
	return float64(n-1) / (float64(last-first) / 1e9)
}

// Concurrency is the peak and the time-weighted mean number of requests in
// flight over [from, to] (ns since the run's start), each record counting
// from its SentNs to its DoneNs (a completion before a send at equal times).
// Records never sent count nowhere.
func Concurrency(recs []Record, from, to int64) (peak int, mean float64) {
	type edge struct {
		at    int64
		delta int
	}
	edges := make([]edge, 0, 2*len(recs))
	for i := range recs {
		if recs[i].SentNs > 0 {
			edges = append(edges, edge{recs[i].SentNs, 1}, edge{recs[i].DoneNs, -1})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		return edges[i].at < edges[j].at || edges[i].at == edges[j].at && edges[i].delta < edges[j].delta
	})
	cur, prev, area := 0, from, 0.0
	for _, e := range edges {
		if e.at > from && prev < to {
			area += float64(cur) * float64(min(e.at, to)-prev)
		}
		prev = max(e.at, from)
		cur += e.delta
		peak = max(peak, cur)
	}
	if to > from {
		mean = area / float64(to-from)
	}
	return peak, mean
}
