// Package openloop is mbench's load generator. It owns:
//
//   - the run spec: Config and the types it holds (shape, arrival, ramp,
//     stop conditions and caps, request), the one vocabulary of a run that
//     the matrix and mbench load both fill in; each type's Validate returns
//     a FieldError whose path names the setting as the matrix does
//     ("arrival.ramp.from"), so each front end can name it in its own terms
//     (config.go, shape.go, arrival.go, ramp.go, request.go, fielderr.go);
//   - the pacer, which says when each request is sent: for a rate process
//     (Poisson, gamma with burstiness, constant, a burst) a Schedule of send
//     offsets precomputed from a seeded RNG, one gap law per process
//     (pacer.go), optionally ramped up inside a run (ramp.go); the closed
//     loop that keeps N requests in flight (closedloop.go); a trace's own
//     times (replay.go);
//   - the workload shapes: fixed, uniform and lognormal lengths, shared
//     prefixes, cache fill, and Mooncake trace replay with sessions
//     (shape.go, prompt.go, trace.go, sample.go, replay.go), and prompts
//     sampled from ShareGPT or JSONL files (dataset.go);
//   - the attacker, the hot path a request takes, from the dispatcher's
//     wait to its record, in one file (attack.go): the dispatchers, and the
//     two clients behind one call (client.go) — the built-in HTTP/1.1
//     client (h1.go) and net/http — with the allocation-free SSE parser,
//     which measure TTFT, ITL and E2EL as `vllm bench serve` defines them
//     for /v1/completions and /v1/chat/completions (sse.go, chunk.go,
//     chat.go);
//   - the run itself: cache fill, warmup and measurement, stop conditions,
//     abort rules, drain, streaming of records (config.go, run.go, open.go);
//   - the reactor (Linux): every request over the built-in HTTP/1.1 client
//     runs as a coroutine of one thread that waits in epoll_wait on all the
//     run's connections (edge-triggered, with EPOLLRDHUP so that a FIN that
//     came with the last data is not missed) and on a timerfd that paces the
//     open loop's sends (reactor_linux.go, reactor_dispatch_linux.go);
//   - elsewhere, and in the wait modes kept for comparison, the open-loop
//     dispatcher: one goroutine that takes prepared requests in schedule
//     order and, with the waiter, waits for each deadline on a Linux
//     timerfd parked in Go's netpoller, busy-waiting only the last 25 µs,
//     and a goroutine per request; either way a late send fires at once and
//     is recorded as send lag (attack.go, wait.go, timerfd_linux.go);
//   - the requests.jsonl record format, encoded without reflection as
//     requests finish, written by one goroutine every 10 ms (sink.go), and
//     read back strictly by ReadRecords (record.go);
//   - the generator's self-grading (send lag, achieved/offered, a
//     Kolmogorov–Smirnov test of the sent gaps) and the precision harness
//     behind `task bench:load` (grade.go, precision.go).
//
// Times in records are monotonic nanoseconds since the run's start
// (Result.Start). Latency can be taken from the send (SentNs) or from the
// intended send (ScheduledNs); the latter cannot hide generator delay
// (coordinated omission).
//
// The package imports nothing else of mbench. The stub subpackage is an
// in-process vLLM-like streaming server with ground-truth logging, used by the
// tests and by the precision harness (precision.go).
package openloop
