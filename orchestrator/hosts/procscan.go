package hosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mbench/mbench/shquote"
)

// procEntry is one process as /proc/<pid>/stat shows it.
type procEntry struct {
	pid, ppid, pgrp int
	state           string // "R", "S", "Z", …
	start           string // field 22: start time in clock ticks after boot
	tag             string // the scan's tag (scanQuery.tags) its environment carries, if any
}

func (p procEntry) live() bool { return p.state != "Z" && p.state != "X" }

// snapshot is one scan of a host's process table, restricted to the
// processes the caller asked about (see scanQuery).
type snapshot map[int]procEntry

// members lists the live processes of group pgid, sorted.
func (s snapshot) members(pgid int) []int {
	var out []int
	for _, p := range s {
		if p.pgrp == pgid && p.live() {
			out = append(out, p.pid)
		}
	}
	slices.Sort(out)
	return out
}

// alive reports whether pid itself is a live process (in any group).
func (s snapshot) alive(pid int) bool {
	p, ok := s[pid]
	return ok && p.live()
}

// leader returns pgid's leader if it is alive and still leads that group.
func (s snapshot) leader(pgid int) (procEntry, bool) {
	p, ok := s[pgid]
	return p, ok && p.live() && p.pgrp == pgid
}

// tree lists, sorted, the live processes that belong to a started process:
// the members of its group, the processes that carry its tag in their
// environment, and every descendant (by parent pid) of either. A process
// that called setsid (a Ray worker) is out of the group but still a
// descendant while its parent lives, and still tagged once re-parented.
func (s snapshot) tree(pgid int, tag string) []int {
	in := map[int]bool{}
	for _, p := range s {
		if p.live() && ((pgid > 1 && p.pgrp == pgid) || (tag != "" && p.tag == tag)) {
			in[p.pid] = true
		}
	}
	for grew := len(in) > 0; grew; {
		grew = false
		for _, p := range s {
			if !in[p.pid] && p.live() && in[p.ppid] {
				in[p.pid], grew = true, true
			}
		}
	}
	return slices.Sorted(maps.Keys(in))
}

// pidRecord is one pidfile: "<pid> <starttime>".
type pidRecord struct {
	path  string
	pid   int    // 0 when the file does not hold a valid pid
	start string // as recorded
}

// scanQuery says what a scan signals and which processes it reports.
type scanQuery struct {
	sig        syscall.Signal // sent first (0: none) to each group of killGroups and each process of killPids
	killGroups []int
	killPids   []int
	pgids      []int    // reported: every member of these groups, and the processes whose pid is one of them
	since      uint64   // reported too: every process started at or after this (clock ticks after boot; 0: none)
	tags       []string // of the processes started since, which carry MBENCH_PROC=tag (procEntry.tag)
}

// wanted reports whether a process belongs in the snapshot of q.
func (q scanQuery) wanted(p procEntry) bool {
	return slices.Contains(q.pgids, p.pgrp) || slices.Contains(q.pgids, p.pid) || q.recent(p)
}

// recent reports whether p started at or after q.since.
func (q scanQuery) recent(p procEntry) bool {
	if q.since == 0 {
		return false
	}
	st, err := strconv.ParseUint(p.start, 10, 64)
	return err == nil && st >= q.since
}

// procTagEnv is the environment variable by which every process a started
// process spawns is known as its own, inside or outside its group:
// MBENCH_PROC=<marker>/<name>.
const procTagEnv = "MBENCH_PROC"

// procTag is the MBENCH_PROC value of the process name started with marker.
func procTag(marker, name string) string { return marker + "/" + name }

// procOps is what stopping and finding engines needs of a host. Every
// method is one step: the local host reads /proc and signals from Go; a
// remote host runs one command per call, so a stop loop costs at most one
// remote command per tick, and no scan of /proc runs in a shell loop.
type procOps interface {
	// scan sends q.sig to q's groups and processes, then scans the process
	// table once and returns the processes q asks about.
	scan(ctx context.Context, q scanQuery) (snapshot, error)
	// marked returns which of pids carry MBENCH_MARKER=marker in their
	// environment.
	marked(ctx context.Context, pids []int, marker string) (map[int]bool, error)
	// pidfiles reads the pidfile target (ending in ".pid") or every
	// "*.pid" in the directory target.
	pidfiles(ctx context.Context, target string) ([]pidRecord, error)
	// remove deletes each pidfile that still names its record's pid.
	remove(ctx context.Context, recs []pidRecord) error
}

// opsFor returns the procOps of h: its own for the hosts of this package,
// else the shell implementation over h.Run.
func opsFor(h Host) procOps {
	if hh, ok := h.(*host); ok && hh.ops != nil {
		return bounded{hh.ops}
	}
	return bounded{shellOps{h}}
}

// bounded makes every call of a procOps return when its ctx is done, even
// if the call itself takes longer to wind down (a remote command under load
// can take a while to end after it is cancelled): a stop's deadline holds
// whatever the transport. An abandoned call finishes in the background.
type bounded struct{ in procOps }

// within runs f and returns its result, or ctx's error once ctx is done.
func within[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := f()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func (b bounded) scan(ctx context.Context, q scanQuery) (snapshot, error) {
	return within(ctx, func() (snapshot, error) { return b.in.scan(ctx, q) })
}

func (b bounded) marked(ctx context.Context, pids []int, marker string) (map[int]bool, error) {
	return within(ctx, func() (map[int]bool, error) { return b.in.marked(ctx, pids, marker) })
}

func (b bounded) pidfiles(ctx context.Context, target string) ([]pidRecord, error) {
	return within(ctx, func() ([]pidRecord, error) { return b.in.pidfiles(ctx, target) })
}

func (b bounded) remove(ctx context.Context, recs []pidRecord) error {
	_, err := within(ctx, func() (struct{}, error) { return struct{}{}, b.in.remove(ctx, recs) })
	return err
}

// parseStat parses the text of one /proc/<pid>/stat. The command name may
// hold spaces and ") ", so the fields are taken after the last ") ".
func parseStat(line string) (procEntry, bool) {
	i := strings.LastIndex(line, ") ")
	j := strings.Index(line, " (")
	if i < 0 || j <= 0 || j > i {
		return procEntry{}, false
	}
	pid, err := strconv.Atoi(line[:j])
	if err != nil || pid <= 0 {
		return procEntry{}, false
	}
	f := strings.Fields(line[i+2:])
	if len(f) < 20 {
		return procEntry{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procEntry{}, false
	}
	return procEntry{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0], start: f[19]}, true
}

// parsePidLine parses the content of a pidfile.
func parsePidLine(path, line string) pidRecord {
	f := strings.Fields(line)
	r := pidRecord{path: path}
	if len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil && n > 1 {
			r.pid, r.start = n, f[1]
		}
	}
	return r
}

// localOps implements procOps for this machine with direct /proc reads and
// kill(2): a scan of a few hundred processes costs a few milliseconds and no
// fork, whatever the load.
type localOps struct{}

func (localOps) scan(ctx context.Context, q scanQuery) (snapshot, error) {
	if q.sig != 0 {
		for _, g := range q.killGroups {
			if g > 1 {
				_ = syscall.Kill(-g, q.sig)
			}
		}
		for _, p := range q.killPids {
			if p > 1 {
				_ = syscall.Kill(p, q.sig)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	snap := snapshot{}
	buf := make([]byte, 1024)
	for _, n := range names {
		if n == "" || n[0] < '0' || n[0] > '9' {
			continue
		}
		st, err := readSmall("/proc/"+n+"/stat", buf)
		if err != nil {
			continue // exited since the directory was read
		}
		if p, ok := parseStat(strings.TrimSpace(st)); ok && q.wanted(p) {
			if len(q.tags) > 0 && q.recent(p) {
				// A process caught mid-exec reads empty; the next scan, a tick later, sees it.
				env, _ := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/environ")
				p.tag = envTag(env, q.tags)
			}
			snap[p.pid] = p
		}
	}
	return snap, nil
}

// envTag returns the tag of tags that env (a /proc environ) carries as
// MBENCH_PROC, or "".
func envTag(env []byte, tags []string) string {
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(procTagEnv+"=")); ok {
			if i := slices.Index(tags, string(v)); i >= 0 {
				return tags[i]
			}
			return ""
		}
	}
	return ""
}

// readSmall reads a small file into buf (a /proc stat line fits in 1 KiB).
func readSmall(path string, buf []byte) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	n, err := f.Read(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func (localOps) marked(_ context.Context, pids []int, marker string) (map[int]bool, error) {
	want := []byte("\x00MBENCH_MARKER=" + marker + "\x00")
	out := map[int]bool{}
	for _, p := range pids {
		if env := readEnviron(p); bytes.Contains(append(append([]byte{0}, env...), 0), want) {
			out[p] = true
		}
	}
	return out, nil
}

// readEnviron reads /proc/<pid>/environ. While a process execs the file
// reads empty for a moment: it is read again (up to ~0.5 s) until it is not
// empty or the process is gone, so an engine caught mid-exec is not taken
// for a stranger.
func readEnviron(pid int) []byte {
	p := "/proc/" + strconv.Itoa(pid)
	for range 100 {
		env, err := os.ReadFile(p + "/environ")
		if len(env) > 0 {
			return env
		}
		if _, serr := os.Stat(p); serr != nil || errors.Is(err, fs.ErrPermission) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// localPath expands a leading "~/" as the scripts do.
func localPath(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return home + p[1:]
		}
	}
	return p
}

func (localOps) pidfiles(_ context.Context, target string) ([]pidRecord, error) {
	var files []string
	if strings.HasSuffix(target, ".pid") {
		files = []string{target}
	} else {
		ents, err := os.ReadDir(localPath(strings.TrimRight(target, "/")))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".pid") && e.Type().IsRegular() {
				files = append(files, strings.TrimRight(target, "/")+"/"+e.Name())
			}
		}
	}
	var out []pidRecord
	for _, f := range files {
		b, err := os.ReadFile(localPath(f))
		if err != nil {
			continue // gone, or removed by a concurrent stop
		}
		line, _, _ := strings.Cut(string(b), "\n")
		out = append(out, parsePidLine(f, line))
	}
	return out, nil
}

func (localOps) remove(_ context.Context, recs []pidRecord) error {
	var errs []error
	for _, r := range recs {
		p := localPath(r.path)
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if parsePidLine(r.path, line).pid != r.pid {
			continue // a newer start owns the file now
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// shellOps implements procOps with one sh command per call, for remote
// hosts (and for any Host that is not of this package).
type shellOps struct{ h Host }

func (o shellOps) scan(ctx context.Context, q scanQuery) (snapshot, error) {
	var b strings.Builder
	name := map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGKILL: "KILL"}[q.sig]
	if q.sig != 0 && name == "" {
		return nil, fmt.Errorf("scan: unsupported signal %v", q.sig)
	}
	var groups []string
	for _, g := range q.pgids {
		if g > 1 {
			groups = append(groups, strconv.Itoa(g))
		}
	}
	if q.sig != 0 {
		for _, g := range q.killGroups {
			if g > 1 {
				fmt.Fprintf(&b, "kill -s %s -- -%d 2>/dev/null; ", name, g)
			}
		}
		for _, p := range q.killPids {
			if p > 1 {
				fmt.Fprintf(&b, "kill -s %s %d 2>/dev/null; ", name, p)
			}
		}
	}
	if len(groups) == 0 && q.since == 0 {
		return snapshot{}, nil
	}
	// awk keeps the lines of those groups (field 5), of those pids and of
	// the processes started since (field 22), taking the fields after the
	// last ") " as Go does; Go parses and filters again, so an odd command
	// name cannot mislead it. Then, per tag, the processes that carry it.
	fmt.Fprintf(&b, `cat /proc/[0-9]*/stat 2>/dev/null | awk -v g=' %s ' -v s=%d '{ n = split($0, a, ") "); split(a[n], f, " "); `+
		`if (index(g, " " f[3] " ") || index(g, " " $1 " ") || (s > 0 && f[20] + 0 >= s)) print }'; `,
		strings.Join(groups, " "), q.since)
	for i, tag := range q.tags {
		fmt.Fprintf(&b, "echo 'mbtag %d'; grep -lsxzF -e %s /proc/[0-9]*/environ; ", i, shquote.Quote(procTagEnv+"="+tag))
	}
	b.WriteString("true")
	out, _, err := o.h.Run(ctx, b.String())
	if err != nil {
		return nil, fmt.Errorf("scan processes on %s: %w", o.h.Name(), err)
	}
	snap := snapshot{}
	tagged := map[int]string{}
	cur := -1
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "mbtag "); ok {
			cur, _ = strconv.Atoi(v)
			continue
		}
		if cur >= 0 && cur < len(q.tags) {
			if v, ok := strings.CutPrefix(line, "/proc/"); ok {
				if pid, err := strconv.Atoi(strings.TrimSuffix(v, "/environ")); err == nil {
					tagged[pid] = q.tags[cur]
				}
			}
			continue
		}
		if p, ok := parseStat(line); ok && q.wanted(p) {
			snap[p.pid] = p
		}
	}
	for pid, tag := range tagged {
		if p, ok := snap[pid]; ok && q.recent(p) {
			p.tag = tag
			snap[pid] = p
		}
	}
	return snap, nil
}

func (o shellOps) marked(ctx context.Context, pids []int, marker string) (map[int]bool, error) {
	out := map[int]bool{}
	if len(pids) == 0 {
		return out, nil
	}
	var list []string
	for _, p := range pids {
		list = append(list, strconv.Itoa(p))
	}
	cmd := markedFn + fmt.Sprintf("\nfor p in %s; do mb_marked \"$p\" %s && echo \"marked $p\"; done; true",
		strings.Join(list, " "), shquote.Quote(marker))
	stdout, _, err := o.h.Run(ctx, cmd)
	if err != nil {
		return nil, fmt.Errorf("check markers on %s: %w", o.h.Name(), err)
	}
	for _, line := range strings.Split(string(stdout), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "marked "); ok {
			if n, err := strconv.Atoi(v); err == nil && slices.Contains(pids, n) {
				out[n] = true
			}
		}
	}
	return out, nil
}

func (o shellOps) pidfiles(ctx context.Context, target string) ([]pidRecord, error) {
	files := quotePath(target)
	if !strings.HasSuffix(target, ".pid") {
		files = quotePath(strings.TrimRight(target, "/")) + "/*.pid"
	}
	// Each file is reported as a "mbpf PATH" line and a "mbpl LINE" line;
	// prefixes keep a login shell's chatter out.
	cmd := fmt.Sprintf(`for f in %s; do [ -f "$f" ] || continue; l=; { read -r l < "$f"; } 2>/dev/null; printf 'mbpf %%s\nmbpl %%s\n' "$f" "$l"; done; true`, files)
	stdout, _, err := o.h.Run(ctx, cmd)
	if err != nil {
		return nil, fmt.Errorf("read pidfiles %s on %s: %w", target, o.h.Name(), err)
	}
	var out []pidRecord
	cur := ""
	for _, line := range strings.Split(string(stdout), "\n") {
		if p, ok := strings.CutPrefix(line, "mbpf "); ok {
			cur = p
		} else if l, ok := strings.CutPrefix(line, "mbpl "); ok && cur != "" {
			path := cur
			if strings.HasSuffix(target, ".pid") {
				path = target // keep "~/" as given
			} else if dir := strings.TrimRight(target, "/"); strings.HasPrefix(dir, "~/") {
				path = dir + "/" + filepath.Base(cur)
			}
			out = append(out, parsePidLine(path, l))
			cur = ""
		}
	}
	return out, nil
}

func (o shellOps) remove(ctx context.Context, recs []pidRecord) error {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "a=; { read -r a b < %[1]s; } 2>/dev/null; [ \"$a\" = %[2]d ] && rm -f -- %[1]s; ", quotePath(r.path), r.pid)
	}
	if b.Len() == 0 {
		return nil
	}
	b.WriteString("true")
	if _, _, err := o.h.Run(ctx, b.String()); err != nil {
		return fmt.Errorf("remove pidfiles on %s: %w", o.h.Name(), err)
	}
	return nil
}
