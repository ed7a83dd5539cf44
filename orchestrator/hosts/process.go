package hosts

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// proc is a Process started by host.Start; a monitor stream stays attached.
type proc struct {
	h     *host
	spec  ProcSpec
	pid   int
	start string // /proc/<pid>/stat field 22

	done chan struct{}
	mu   sync.Mutex
	err  error
}

// Start implements Host.Start; see ProcSpec and the package doc.
func (h *host) Start(ctx context.Context, spec ProcSpec) (Process, error) {
	spec, err := validateSpec(spec)
	if err != nil {
		return nil, err
	}
	tag := "mbench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.Itoa(rand.IntN(1<<30))
	script := startScript(spec, spec.Tether && h.t.canTether(), tag)
	st, err := h.t.open(ctx, evalStdin(len(script)))
	if err != nil {
		return nil, fmt.Errorf("start %s on %s: %w", spec.Name, h.name, err)
	}
	untrack, err := track(st)
	if err != nil {
		st.kill()
		go func() { _ = st.wait() }()
		return nil, fmt.Errorf("start %s on %s: %w", spec.Name, h.name, err)
	}
	defer untrack()
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(st.stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	go func() { _, _ = st.stdin.Write([]byte(script)) }()

	fail := func(err error) (Process, error) {
		st.kill()
		drainLines(lines)
		go func() { _ = st.wait() }() // reap; a second wait is harmless
		// The launch may have happened: stop whatever the pidfile names.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		_, _ = leftoverScan(cctx, h, pidfilePath(spec), spec.Marker, true, 0)
		return nil, fmt.Errorf("start %s on %s: %w", spec.Name, h.name, err)
	}
	var first string
	for first == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				werr := st.wait()
				if werr == nil {
					werr = errors.New("monitor exited without reporting")
				}
				if s := strings.TrimSpace(st.stderr.String()); s != "" {
					werr = fmt.Errorf("%w: %s", werr, s)
				}
				return fail(werr)
			}
			// Skip anything a noisy login shell printed before the script.
			if rest, ok := strings.CutPrefix(l, tag+" "); ok {
				first = rest
			}
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	f := strings.Fields(first)
	if msg, ok := strings.CutPrefix(first, "error: "); ok {
		_ = st.stdin.Close() // the script has returned; let it end
		drainLines(lines)
		go func() { _ = st.wait(); st.kill() }()
		return nil, fmt.Errorf("start %s on %s: %s (state dir %s, log %s, dir %q)", spec.Name, h.name, msg,
			spec.StateDir, spec.LogPath, spec.Dir)
	}
	if len(f) != 3 || f[0] != "started" {
		return fail(fmt.Errorf("unexpected monitor output %q", first))
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil || pid <= 1 {
		return fail(fmt.Errorf("unexpected monitor output %q", first))
	}
	p := &proc{h: h, spec: spec, pid: pid, start: f[2], done: make(chan struct{})}
	go p.monitor(st, lines, tag)
	return p, nil
}

// starting holds the monitors of the launches under way, for AbortStarts.
var starting = struct {
	sync.Mutex
	m       map[*stream]struct{}
	aborted bool // AbortStarts was called: no launch may begin
}{m: map[*stream]struct{}{}}

// errAborted refuses a launch after AbortStarts.
var errAborted = errors.New("launches aborted (mbench is exiting)")

// track records st as a launch under way until the returned func is
// called; after AbortStarts it refuses.
func track(st *stream) (func(), error) {
	starting.Lock()
	defer starting.Unlock()
	if starting.aborted {
		return nil, errAborted
	}
	starting.m[st] = struct{}{}
	return func() {
		starting.Lock()
		defer starting.Unlock()
		delete(starting.m, st)
	}, nil
}

// AbortStarts kills every launch under way in this process (Host.Start
// calls that have not returned): locally the monitor's process group, which
// still holds an engine that has not yet left it; over SSH the session,
// whose tether then kills the engine. An engine that has already left the
// group is named by its pidfile, so AbortStarts followed by StopLeftovers
// leaves nothing running, whatever instant of a launch it hits. Every later
// Start fails. For an emergency exit (a second Ctrl-C).
func AbortStarts() {
	starting.Lock()
	defer starting.Unlock()
	starting.aborted = true
	for st := range starting.m {
		st.kill()
	}
}

// monitor waits for "exited STATUS" and then for the stream to end.
func (p *proc) monitor(st *stream, lines <-chan string, tag string) {
	var err error
	got := false
	for l := range lines {
		if rest, ok := strings.CutPrefix(l, tag+" exited "); ok {
			code, cerr := strconv.Atoi(strings.TrimSpace(rest))
			if cerr != nil {
				err = fmt.Errorf("process %s: unexpected monitor output %q", p.spec.Name, l)
			} else if code != 0 {
				err = &ExitError{Code: code}
			}
			got = true
			break
		}
	}
	drainLines(lines)
	_ = st.stdin.Close() // releases the tether's cat (the group is gone already)
	werr := st.wait()
	switch {
	case got:
	case errors.Is(werr, ErrConnectionLost):
		err = fmt.Errorf("process %s (pid %d) on %s: %w", p.spec.Name, p.pid, p.h.name, ErrConnectionLost)
	default:
		err = fmt.Errorf("process %s (pid %d) on %s: monitor ended without an exit status: %v %s",
			p.spec.Name, p.pid, p.h.name, werr, strings.TrimSpace(st.stderr.String()))
	}
	st.kill()
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	close(p.done)
}

// drainLines discards the rest of lines in the background, so that the
// scanner feeding it never blocks.
func drainLines(lines <-chan string) {
	go func() {
		for range lines {
		}
	}()
}

func (p *proc) Pid() int              { return p.pid }
func (p *proc) Done() <-chan struct{} { return p.done }

func (p *proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *proc) Stop(ctx context.Context, grace time.Duration) error {
	ops := opsFor(p.h)
	rec := pidRecord{path: pidfilePath(p.spec), pid: p.pid, start: p.start}
	wrap := func(err error) error {
		return fmt.Errorf("stop %s (pgid %d) on %s: %w", p.spec.Name, p.pid, p.h.name, err)
	}
	_, ours, err := ownedGroups(ctx, ops, []pidRecord{rec}, p.spec.Marker)
	if err != nil {
		return wrap(err)
	}
	if ours[p.pid] {
		surv, err := killTargets(ctx, ops, []stopTarget{{pgid: p.pid, start: p.start, tag: procTag(p.spec.Marker, p.spec.Name)}}, grace)
		if err != nil {
			return wrap(err)
		}
		if len(surv) > 0 {
			return wrap(fmt.Errorf("processes still alive after SIGKILL: %v", surv))
		}
	}
	// Within the deadline only: a pidfile left behind names a group that is
	// gone, and the next leftover scan removes it.
	if err := ops.remove(ctx, []pidRecord{rec}); err != nil && ctx.Err() == nil {
		return wrap(err)
	}
	// Let the monitor report the exit status before returning.
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

func (p *proc) LogTail(ctx context.Context, n int) string {
	if n <= 0 {
		n = 20
	}
	out, _, err := p.h.Run(ctx, fmt.Sprintf("tail -n %d -- %s", n, quotePath(p.spec.LogPath)))
	if err != nil {
		return fmt.Sprintf("(log %s on %s unavailable: %v)", p.spec.LogPath, p.h.name, err)
	}
	return string(out)
}
