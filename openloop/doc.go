// Package openloop is mbench's load generator. It owns:
//
//   - the run spec: Config and the types it holds (shape, arrival, ramp,
//     stop conditions and caps, request), the one vocabulary of a run that
//     the matrix and mbench load both fill in; each type's Validate returns
//     a FieldError whose path names the setting as the matrix does
//     ("arrival.ramp.from"), so each front end can name it in its own terms
//     (config.go, shape.go, schedule.go, ramp.go, request.go, fielderr.go);
//   - the arrival processes (Poisson, gamma with burstiness, constant), whose
//     send times are precomputed from a seeded RNG as absolute offsets
//     (schedule.go), optionally ramped up inside a run (ramp.go); and the
//     closed loop that keeps N requests in flight (closedloop.go);
//   - the workload shapes: fixed, uniform and lognormal lengths, shared
//     prefixes, cache fill, and Mooncake trace replay with sessions
//     (shape.go, prompt.go, trace.go, sample.go, replay.go), and prompts
//     sampled from ShareGPT or JSONL files (dataset.go);
//   - the streaming OpenAI /v1/completions and /v1/chat/completions
//     (chat.go) client and its allocation-free SSE
//     parser, which measure TTFT, ITL and E2EL as `vllm bench serve` defines
//     them (client.go, sse.go, chunk.go);
//   - the run itself: cache fill, warmup and measurement, stop conditions,
//     abort rules, drain, streaming of records (config.go, run.go); the hot
//     path a request takes, from the dispatcher's wait to its record, reads
//     in one file (attack.go);
//   - the reactor (Linux): every request over the built-in HTTP/1.1 client
//     runs as a coroutine of one thread that waits in epoll_wait on all the
//     run's connections (edge-triggered, with EPOLLRDHUP so that a FIN that
//     came with the last data is not missed) and on a timerfd that paces the
//     open loop's sends (reactor_linux.go, reactor_dispatch_linux.go);
//   - elsewhere, and in the pacer modes kept for comparison, the open-loop
//     dispatcher: one goroutine that takes prepared requests in schedule
//     order and waits for each deadline on a Linux timerfd parked in Go's
//     netpoller, busy-waiting only the last 25 µs, and a goroutine per
//     request; either way a late send fires at once and is recorded as send
//     lag (attack.go, open.go, pacer.go, timerfd_linux.go);
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
// tests and by MeasurePrecision.
package openloop
