package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mbench/mbench/probes"
	"github.com/urfave/cli/v2"
)

func probeCommand() *cli.Command {
	return &cli.Command{
		Name:  "probe",
		Usage: "sample every GPU (NVML) and the host; stream gpu.jsonl to stdout, or run the GPU gate",
		Description: "Streams one gpu.jsonl line per GPU every --interval, and one host.jsonl line\n" +
			"(cpu_pct, memory, load1) per interval on the same stream unless --host-out says\n" +
			"otherwise. Without a GPU or NVML it says so once on stderr and keeps the host samples.\n" +
			"--once prints one round and exits. --gate measures the idle baseline (or reads it\n" +
			"from --baseline, the first sample per GPU of a gpu.jsonl), waits until every GPU's\n" +
			"memory is back at idle, its temperature within --band of the baseline and no foreign\n" +
			"process on it (any process not in an --own-pgid process group or session), and prints\n" +
			"the gate result as JSON. A measured baseline waits for foreign processes to leave, up to\n" +
			"--timeout, and says how it was taken.",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "interval", Value: probes.DefaultInterval, Usage: "sampling interval"},
			&cli.StringFlag{Name: "host", Usage: "host name recorded in every line (default: the hostname)"},
			&cli.StringFlag{Name: "gpu-out", Value: "-", Usage: "file for gpu.jsonl lines (- = stdout)"},
			&cli.StringFlag{Name: "host-out", Value: "-", Usage: "file for host.jsonl lines (- = stdout, none = off)"},
			&cli.DurationFlag{Name: "duration", Usage: "stop after this long (0 = until interrupted)"},
			&cli.BoolFlag{Name: "once", Usage: "print one round of samples and exit"},
			&cli.BoolFlag{Name: "report-cost", Usage: "at the end, print on stderr the CPU the sampling used (steady state)"},
			&cli.BoolFlag{Name: "gate", Usage: "run the GPU gate and print its result as JSON"},
			&cli.Float64Flag{Name: "band", Value: probes.DefaultTempBandC, Usage: "gate: temperature band around the baseline, °C"},
			&cli.Float64Flag{Name: "mem-tol", Value: probes.DefaultMemToleranceMiB, Usage: "gate: memory above the idle baseline still counted idle, MiB"},
			&cli.DurationFlag{Name: "timeout", Value: 60 * time.Second, Usage: "gate: give up (timed_out) after this long"},
			&cli.DurationFlag{Name: "poll", Value: probes.DefaultGatePoll, Usage: "gate: polling interval"},
			&cli.StringFlag{Name: "baseline", Usage: "gate: gpu.jsonl whose first sample per GPU is the baseline (default: measure now)"},
			&cli.IntSliceFlag{Name: "own-pgid", Usage: "gate: GPU processes in this process group or session are not foreign (repeatable)"},
		},
		Action: probeAction,
	}
}

func probeAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageError{fmt.Errorf("probe: unexpected argument %q", c.Args().First())}
	}
	if c.Duration("interval") <= 0 || c.Duration("duration") < 0 || c.Duration("timeout") <= 0 ||
		c.Duration("poll") <= 0 || c.Float64("band") <= 0 || c.Float64("mem-tol") < 0 {
		return usageError{errors.New("probe: --interval, --timeout, --poll and --band must be positive; --duration and --mem-tol not negative")}
	}
	host := c.String("host")
	if host == "" {
		host, _ = os.Hostname()
	}
	lib, closeNVML, err := probes.OpenNVML()
	if err != nil {
		fmt.Fprintf(c.App.ErrWriter, "probe: NVML unavailable (%v): GPU samples off, host samples continue\n", err)
	}
	defer closeNVML()
	s := probes.NewSampler(lib, host, c.Duration("interval"), nil)
	if c.Bool("gate") {
		return probeGate(c, s, lib != nil, host)
	}
	gpuW, closeG, err := probeOutput(c.String("gpu-out"), c.App.Writer)
	if err != nil {
		return err
	}
	defer closeG()
	hostW, closeH, err := probeOutput(c.String("host-out"), c.App.Writer)
	if err != nil {
		return err
	}
	defer closeH()
	ctx := c.Context
	if c.Bool("once") {
		if hostW != nil { // CPU % over a short interval
			s.SampleHost(ctx)
			time.Sleep(200 * time.Millisecond)
		}
		return s.Tick(ctx, gpuW, hostW, true)
	}
	if d := c.Duration("duration"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	if c.Bool("report-cost") {
		// Count the steady state only: the first NVML queries (device
		// discovery, lazy driver set-up) cost tens of ms once.
		if _, err := s.SampleGPUs(); err != nil {
			return err
		}
	}
	cpu0, _ := probes.ProcessCPU()
	t0 := time.Now()
	err = s.Run(ctx, gpuW, hostW)
	if c.Bool("report-cost") {
		cpu1, cerr := probes.ProcessCPU()
		wall := time.Since(t0)
		if cerr == nil && s.Rounds() > 0 && wall > 0 {
			used := cpu1 - cpu0
			fmt.Fprintf(c.App.ErrWriter, "probe: %d rounds in %.1f s used %.1f ms CPU (after one warm-up round): %.0f µs per round, %.3f%% of one core\n",
				s.Rounds(), wall.Seconds(), used.Seconds()*1e3, used.Seconds()*1e6/float64(s.Rounds()), 100*used.Seconds()/wall.Seconds())
		}
	}
	return err
}

// probeOutput opens "-" (w), "none"/"" (off: nil) or a file.
func probeOutput(name string, w io.Writer) (io.Writer, func(), error) {
	switch name {
	case "-":
		return w, func() {}, nil
	case "", "none":
		return nil, func() {}, nil
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, nil, fmt.Errorf("probe: %w", err)
	}
	return f, func() { f.Close() }, nil
}

func probeGate(c *cli.Context, s *probes.Sampler, haveGPU bool, host string) error {
	g := &probes.Gate{
		Read:            func(context.Context) ([]probes.GPUSample, error) { return s.SampleGPUs() },
		TempBandC:       c.Float64("band"),
		MemToleranceMiB: c.Float64("mem-tol"),
		Timeout:         c.Duration("timeout"),
		Poll:            c.Duration("poll"),
		Owner:           probes.EngineGroups{host: c.IntSlice("own-pgid")},
	}
	var out probeGateOut
	if haveGPU {
		if p := c.String("baseline"); p != "" {
			base, err := firstPerGPU(p, host)
			if err != nil {
				return usageError{err}
			}
			g.Baseline = base
		} else {
			rec, err := g.MeasureBaseline(c.Context)
			if err != nil {
				return err
			}
			out.Baseline = &rec
		}
	}
	res, err := g.Wait(c.Context)
	if err != nil {
		return err
	}
	out.GateResult = res
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Fprintln(c.App.Writer, string(b))
	return nil
}

// probeGateOut is what `probe --gate` prints: the gate result, and how the
// baseline was taken when it was measured.
type probeGateOut struct {
	Baseline *probes.BaselineRecord `json:"baseline,omitempty"`
	probes.GateResult
}

// firstPerGPU reads a gpu.jsonl and keeps each GPU's first sample, as this
// host's baseline.
func firstPerGPU(path, host string) ([]probes.GPUSample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("probe --baseline: %w", err)
	}
	defer f.Close()
	all, err := probes.ReadGPUSamples(f)
	if err != nil {
		return nil, fmt.Errorf("probe --baseline %s: %w", path, err)
	}
	seen := map[int]bool{}
	var out []probes.GPUSample
	for _, s := range all {
		if !seen[s.GPU] {
			seen[s.GPU] = true
			s.Host = host
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("probe --baseline %s: no GPU samples", path)
	}
	return out, nil
}
