package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mbench/mbench/internal/cpupin"
	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/openloop/stub"
	"github.com/mbench/mbench/stats"
	"github.com/urfave/cli/v2"
)

func benchLoadCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench-load",
		Usage: "measure the load generator against a realistic stub in a process of its own on 127.0.0.1",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "rates", Value: "500,1000,2000,4000", Usage: "comma-separated Poisson rates (req/s)"},
			&cli.DurationFlag{Name: "duration", Value: 3 * time.Second, Usage: "measured time per run"},
			&cli.IntFlag{Name: "runs", Value: 5, Usage: "runs per rate, the rates (and clients) interleaved"},
			&cli.DurationFlag{Name: "first-token", Value: openloop.RealisticStub.FirstToken, Usage: "stub: arrival to first token"},
			&cli.DurationFlag{Name: "gap", Value: openloop.RealisticStub.Gap, Usage: "stub: between tokens (each flushed on its own)"},
			&cli.IntFlag{Name: "tokens", Value: openloop.RealisticStub.Tokens, Usage: "stub: tokens per request"},
			&cli.StringFlag{Name: "client-cpus", Usage: "pin the load generator (and a --compare client) to these CPUs, e.g. 0,1 (Linux)"},
			&cli.StringFlag{Name: "stub-cpus", Usage: "pin the stub process to these CPUs, e.g. 2-5 (Linux); the same list as --client-cpus shares them"},
			&cli.StringFlag{Name: "compare", Usage: "another load generator to run at every point beside mbench's, as a command (see docs/loadgen.md: its arguments and records)"},
			&cli.StringFlag{Name: "compare-name", Value: "other", Usage: "the --compare client's name in the table"},
			&cli.StringFlag{Name: "compare-rates", Usage: "the rates at which to run the --compare client (default: --rates)"},
			formatFlag("text", "json"), formatAlias("json"),
		},
		Action: benchLoadAction,
	}
}

func benchStubCommand() *cli.Command {
	return &cli.Command{
		Name:   "bench-stub",
		Usage:  "the stub server of bench-load (started by it; serves until stdin closes)",
		Hidden: true,
		Action: func(c *cli.Context) error { return stub.ServeProcess(os.Stdin, c.App.Writer) },
	}
}

// benchClient is one load generator bench-load measures.
type benchClient struct {
	name    string
	measure func(ctx context.Context, tgt openloop.PrecisionTarget, rate float64, dur time.Duration, run int) (openloop.PrecisionRow, error)
	rates   []float64 // the rates it runs at; nil: all
}

// runsAt reports whether c runs at rate.
func (c benchClient) runsAt(rate float64) bool {
	return c.rates == nil || slices.Contains(c.rates, rate)
}

func benchLoadAction(c *cli.Context) error {
	format, err := outputFormat(c, "bench-load", []string{"text", "json"}, "json")
	if err != nil {
		return err
	}
	rates, err := parseRates("bench-load", "--rates", c.String("rates"))
	if err != nil {
		return err
	}
	runs, tokens := c.Int("runs"), c.Int("tokens")
	if runs < 1 || tokens < 1 || c.Duration("duration") <= 0 || c.Duration("first-token") < 0 || c.Duration("gap") < 0 {
		return usageError{fmt.Errorf("bench-load: --runs, --tokens and --duration must be > 0, --first-token and --gap ≥ 0")}
	}
	var clientCPUs, stubCPUs []int
	for _, f := range []struct {
		name string
		dst  *[]int
	}{{"client-cpus", &clientCPUs}, {"stub-cpus", &stubCPUs}} {
		if v := c.String(f.name); v != "" {
			if *f.dst, err = cpupin.Parse(v); err != nil {
				return usageError{fmt.Errorf("bench-load: --%s: %w", f.name, err)}
			}
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench-load: %w", err)
	}
	opts := stub.Options{Tokens: tokens, FirstToken: c.Duration("first-token"), Gap: c.Duration("gap"), CPUs: stubCPUs}
	p, err := stub.StartProcess(c.Context, []string{exe, "bench-stub"}, opts)
	if err != nil {
		return fmt.Errorf("bench-load: %w", err)
	}
	defer p.Close()
	if len(clientCPUs) > 0 {
		if err := cpupin.Self(clientCPUs); err != nil {
			return fmt.Errorf("bench-load: %w", err)
		}
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(max(2, len(clientCPUs))) // the reactor needs two Ps
		}
	}
	tgt := openloop.PrecisionTarget{URL: p.URL, Reset: p.Reset, Entries: p.Entries, CPU: p.CPUSeconds, Output: tokens}
	clients, err := benchClients(c, rates, clientCPUs)
	if err != nil {
		return err
	}
	w := c.App.Writer
	if format == "json" { // stdout carries the JSON alone; the table goes to stderr as the runs end
		w = c.App.ErrWriter
	}
	fmt.Fprintf(w, "stub: separate process, %d tokens each flushed alone, first after %v, then every %v; prompts of %d tokens; Poisson; %v per run\n",
		tokens, opts.FirstToken, opts.Gap, openloop.PrecisionInput, c.Duration("duration"))
	fmt.Fprintf(w, "cores: client %s, stub %s (%d CPUs online, GOMAXPROCS %d)\n", cpusWords(clientCPUs), cpusWords(stubCPUs), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	openloop.WritePrecisionHeader(w)
	rows, err := runBench(c.Context, w, tgt, clients, rates, runs, c.Duration("duration"))
	if err != nil {
		return err
	}
	writeBenchSummary(w, rows, clients, rates, runs)
	if format == "json" {
		return json.NewEncoder(c.App.Writer).Encode(rows)
	}
	return nil
}

// benchClients are the load generators bench-load measures: mbench, and
// the --compare command if one is given.
func benchClients(c *cli.Context, rates []float64, clientCPUs []int) ([]benchClient, error) {
	var err error
	clients := []benchClient{{name: "mbench", measure: func(ctx context.Context, tgt openloop.PrecisionTarget, rate float64, dur time.Duration, _ int) (openloop.PrecisionRow, error) {
		return openloop.MeasurePrecisionAgainst(ctx, tgt, rate, dur)
	}}}
	if cmd := strings.Fields(c.String("compare")); len(cmd) > 0 {
		ext := externalClient{argv: cmd, cpus: clientCPUs}
		only := rates
		if v := c.String("compare-rates"); v != "" {
			if only, err = parseRates("bench-load", "--compare-rates", v); err != nil {
				return nil, err
			}
		}
		clients = append(clients, benchClient{name: c.String("compare-name"), measure: ext.measure, rates: only})
	}
	return clients, nil
}

// runBench measures each client at each rate it runs at, runs times over,
// and writes each row to w as it ends.
func runBench(ctx context.Context, w io.Writer, tgt openloop.PrecisionTarget, clients []benchClient, rates []float64, runs int, dur time.Duration) ([]openloop.PrecisionRow, error) {
	var rows []openloop.PrecisionRow
	for run := range runs {
		for _, rate := range rates {
			for _, cl := range clients {
				if !cl.runsAt(rate) {
					continue
				}
				row, err := cl.measure(ctx, tgt, rate, dur, run)
				if err != nil {
					return nil, fmt.Errorf("bench-load: %s: %w", cl.name, err)
				}
				row.Client = cl.name
				openloop.WritePrecisionRow(w, row)
				rows = append(rows, row)
			}
		}
	}
	return rows, nil
}

// cpusWords names a pinning for the table's heading.
func cpusWords(cpus []int) string {
	if len(cpus) == 0 {
		return "not pinned"
	}
	return "on CPUs " + cpupin.Format(cpus)
}

// writeBenchSummary writes, per client, how often each rate held and the
// highest rate that held in at least 4 of 5 runs (80%), and, with a second
// client, the ratios of the first to it: of those highest rates, and of
// the client CPU per request at the highest rate both held.
func writeBenchSummary(w io.Writer, rows []openloop.PrecisionRow, clients []benchClient, rates []float64, runs int) {
	need := int(math.Ceil(0.8 * float64(runs)))
	best := map[string]float64{}
	for _, cl := range clients {
		for _, rate := range rates {
			if !cl.runsAt(rate) {
				continue
			}
			held := 0
			for _, r := range rows {
				if r.Client == cl.name && r.Rate == rate && r.Holds {
					held++
				}
			}
			fmt.Fprintf(w, "%s: rate %g holds in %d of %d runs\n", cl.name, rate, held, runs)
			if held >= need && rate > best[cl.name] {
				best[cl.name] = rate
			}
		}
		fmt.Fprintf(w, "%s: highest rate holding achieved/offered >= %.2f and lag p99 <= %.0f ms in >= %d of %d runs: %g req/s\n",
			cl.name, openloop.PrecisionMinRatio, openloop.PrecisionMaxLagP99Ms, need, runs, best[cl.name])
	}
	if len(clients) < 2 {
		return
	}
	a, b := clients[0].name, clients[1].name
	if best[b] > 0 {
		fmt.Fprintf(w, "%s holds %.3g× the rate %s holds (%g vs %g req/s)\n", a, best[a]/best[b], b, best[a], best[b])
	} else {
		fmt.Fprintf(w, "%s held none of the rates in >= %d of %d runs; %s held %g req/s\n", b, need, runs, a, best[a])
	}
	if at := min(best[a], best[b]); at > 0 {
		ca, cb := medianCPU(rows, a, at), medianCPU(rows, b, at)
		fmt.Fprintf(w, "at %g req/s: client CPU %.3f ms/req (%s) vs %.3f (%s), %.2f× (medians of the runs)\n", at, ca, a, cb, b, ca/cb)
	}
}

// medianCPU is the median client CPU per request of client's runs at rate
// (NaN: none).
func medianCPU(rows []openloop.PrecisionRow, client string, rate float64) float64 {
	var v []float64
	for _, r := range rows {
		if r.Client == client && r.Rate == rate {
			v = append(v, r.ClientCPUMsReq)
		}
	}
	return stats.Percentile(v, 50)
}

// externalClient is a load generator of another make, run as a command:
// argv plus --url, --rate, --duration (s), --warmup (requests), --input,
// --output, --seed, --out FILE and --cpus LIST when pinned. It writes FILE
// as requests.jsonl lines (openloop.Record: id, phase, request_id,
// scheduled_ns, sent_ns, first_token_ns, last_token_ns, done_ns, itl_ms,
// output_tokens, status; times in ns from its start) and FILE.meta as
// {"start_unix_ns": its start on the wall clock, "cpu_s": its CPU time}.
type externalClient struct {
	argv []string
	cpus []int
}

// externalMeta is the FILE.meta of an externalClient run.
type externalMeta struct {
	StartUnixNs int64   `json:"start_unix_ns"`
	CPUSeconds  float64 `json:"cpu_s"`
}

func (e externalClient) measure(ctx context.Context, tgt openloop.PrecisionTarget, rate float64, dur time.Duration, run int) (openloop.PrecisionRow, error) {
	if err := tgt.Reset(ctx); err != nil {
		return openloop.PrecisionRow{}, err
	}
	dir, err := os.MkdirTemp("", "mbench-bench-load-")
	if err != nil {
		return openloop.PrecisionRow{}, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "requests.jsonl")
	args := append(append([]string(nil), e.argv[1:]...), "--url", tgt.URL, "--rate", strconv.FormatFloat(rate, 'g', -1, 64),
		"--duration", strconv.FormatFloat(dur.Seconds(), 'g', -1, 64), "--warmup", strconv.Itoa(int(math.Ceil(rate/4))),
		"--input", strconv.Itoa(openloop.PrecisionInput), "--output", strconv.Itoa(tgt.Output), "--seed", strconv.Itoa(run+1), "--out", out)
	if len(e.cpus) > 0 {
		args = append(args, "--cpus", cpupin.Format(e.cpus))
	}
	cmd := exec.CommandContext(ctx, e.argv[0], args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	s0, _ := tgt.CPU()
	if err := cmd.Run(); err != nil {
		return openloop.PrecisionRow{}, fmt.Errorf("%s: %w", strings.Join(e.argv, " "), err)
	}
	s1, _ := tgt.CPU()
	f, err := os.Open(out)
	if err != nil {
		return openloop.PrecisionRow{}, err
	}
	recs, err := openloop.ReadRecords(f)
	f.Close()
	if err != nil {
		return openloop.PrecisionRow{}, fmt.Errorf("%s: %w", out, err)
	}
	var meta externalMeta
	b, err := os.ReadFile(out + ".meta")
	if err == nil {
		err = json.Unmarshal(b, &meta)
	}
	if err != nil || meta.StartUnixNs == 0 || len(recs) == 0 {
		return openloop.PrecisionRow{}, fmt.Errorf("%s.meta: %v (%d records)", out, err, len(recs))
	}
	entries, err := tgt.Entries(ctx)
	if err != nil {
		return openloop.PrecisionRow{}, err
	}
	res := &openloop.Result{Records: recs, Start: time.Unix(0, meta.StartUnixNs), Offered: rate}
	res.Grade = openloop.SelfGrade(recs, rate, openloop.Arrival{Process: openloop.ArrivalPoisson})
	row := openloop.PrecisionOf(rate, res, entries)
	row.ClientCPUMsReq = 1e3 * meta.CPUSeconds / float64(len(recs))
	row.StubCPUMsReq = 1e3 * (s1 - s0) / float64(len(recs))
	row.LoadAvg = openloop.LoadAvg()
	return row, nil
}
