package hosts

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/mbench/mbench/shquote"
)

// quotePath quotes a path for the scripts; a leading "~/" becomes "$HOME"/.
func quotePath(p string) string {
	if p == "~" {
		return `"$HOME"`
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return `"$HOME"/` + shquote.Quote(rest)
	}
	return shquote.Quote(p)
}

// markedFn is mb_marked PID M: 0 if PID's environment holds
// MBENCH_MARKER=M. While a process execs, /proc/PID/environ reads empty for
// a moment; it is read again (up to ~0.5 s) until it is not empty or the
// process is gone, so an engine caught mid-exec is not taken for a stranger.
const markedFn = `mb_marked() {
	mb_j=0
	while [ "$mb_j" -lt 50 ]; do
		mb_e=$(tr '\000' '\n' < "/proc/$1/environ" 2>/dev/null)
		if [ -n "$mb_e" ]; then
			printf '%s\n' "$mb_e" | grep -qxF -e "MBENCH_MARKER=$2"
			return
		fi
		[ -e "/proc/$1" ] || return 1
		sleep 0.01; mb_j=$((mb_j+1))
	done
	return 1
}`

// shLib is the shell library of the start script. It reads /proc
// with builtins only, so a scan of all processes costs no fork per process.
//
//	mb_stat PID          sets mb_state, mb_pgrp, mb_start (field 22); 1 if gone
//	mb_members PGID      sets mb_list to the live (non-zombie) pids of the group
//	mb_marked PID M      0 if PID's environment holds MBENCH_MARKER=M
//	mb_ours PID START M  0 if the group PID is ours: the leader is alive with
//	                     that start time and the marker, or the leader is gone
//	                     and a live member carries the marker
//	mb_settle PID        wait (up to 5 s) until PID leads its own group or is gone
//	mb_tagged TAG        sets mb_tl to the pids whose environment holds
//	                     MBENCH_PROC=TAG (none for an empty TAG)
//	mb_kill PID START M TICKS TAG  TERM the group (if ours) and the processes
//	                     tagged TAG (which left it), wait TICKS×0.1 s, KILL,
//	                     wait up to 10 s; 0 when nothing of either is left
//
// Only the SSH tether runs mb_kill (on the host, after mbench is gone); every
// stop mbench makes itself scans processes from Go (see procOps).
const shLib = `
mb_stat() {
	mb_s=
	{ read -r mb_s < "/proc/$1/stat"; } 2>/dev/null
	[ -n "$mb_s" ] || return 1
	mb_r=${mb_s##*") "}
	set -- $mb_r
	[ $# -ge 20 ] || return 1
	mb_state=$1; mb_pgrp=$3; shift 19; mb_start=$1
}
mb_members() {
	mb_list=
	for mb_f in /proc/[0-9]*; do
		mb_p=${mb_f#/proc/}
		mb_stat "$mb_p" || continue
		if [ "$mb_pgrp" = "$1" ] && [ "$mb_state" != Z ] && [ "$mb_state" != X ]; then
			mb_list="$mb_list $mb_p"
		fi
	done
	mb_list=${mb_list# }
}
` + markedFn + `
mb_ours() {
	if mb_stat "$1" && [ "$mb_state" != Z ] && [ "$mb_state" != X ]; then
		[ "$mb_start" = "$2" ] && mb_marked "$1" "$3"
		return
	fi
	mb_members "$1"
	for mb_m in $mb_list; do
		mb_marked "$mb_m" "$3" && return 0
	done
	return 1
}
mb_settle() {
	mb_i=0
	while mb_stat "$1" && [ "$mb_pgrp" != "$1" ] && [ "$mb_state" != Z ] && [ "$mb_i" -lt 500 ]; do
		sleep 0.01; mb_i=$((mb_i+1))
	done
}
mb_tagged() {
	mb_tl=
	[ -n "$1" ] || return 0
	for mb_f in $(grep -lsxzF -e "MBENCH_PROC=$1" /proc/[0-9]*/environ 2>/dev/null); do
		mb_f=${mb_f#/proc/}; mb_tl="$mb_tl ${mb_f%/environ}"
	done
	mb_tl=${mb_tl# }
}
mb_left() {
	mb_list=
	[ -n "$mb_g" ] && mb_members "$1"
	mb_tagged "$2"
	mb_list="$mb_list $mb_tl"; mb_list=${mb_list# }; mb_list=${mb_list% }
}
mb_kill() {
	mb_g=; mb_ours "$1" "$2" "$3" && mb_g=1
	mb_tagged "$5"
	[ -n "$mb_g$mb_tl" ] || { mb_list=; return 0; }
	[ -n "$mb_g" ] && kill -s TERM -- "-$1" 2>/dev/null
	[ -n "$mb_tl" ] && kill -s TERM $mb_tl 2>/dev/null
	mb_i=0
	while :; do
		mb_left "$1" "$5"
		[ -z "$mb_list" ] && return 0
		[ "$mb_i" -ge "$4" ] && break
		sleep 0.1; mb_i=$((mb_i+1))
	done
	[ -n "$mb_g" ] && kill -s KILL -- "-$1" 2>/dev/null
	kill -s KILL $mb_list 2>/dev/null
	mb_i=0
	while [ "$mb_i" -lt 100 ]; do
		mb_left "$1" "$5"
		[ -z "$mb_list" ] && return 0
		kill -s KILL $mb_tl 2>/dev/null
		sleep 0.1; mb_i=$((mb_i+1))
	done
	return 1
}
`

// runWrapper runs "$1" in its own session and kills that session's group when
// stdin reaches EOF, which is how a cancelled SSH Run is killed remotely.
const runWrapper = `exec 3<&0
( exec setsid sh -c "$1" ) 3<&- </dev/null &
mb_p=$!
( cat <&3 >/dev/null 2>&1; kill -s KILL -- "-$mb_p" 2>/dev/null ) >/dev/null 2>&1 &
mb_w=$!
exec 3<&-
wait "$mb_p"; mb_rc=$?
kill "$mb_w" 2>/dev/null
exit "$mb_rc"`

// evalStdin returns the command line that reads an n-byte script from stdin,
// byte by byte so that nothing after it is consumed, and evaluates it. The
// script's secrets therefore never reach a command line.
func evalStdin(n int) string {
	return fmt.Sprintf(`sh -c 'eval "$(dd bs=1 count=%d 2>/dev/null)"'`, n)
}

var (
	nameRe    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`)
	envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// checkMarker validates a leftover marker.
func checkMarker(m string) error {
	if m == "" {
		return fmt.Errorf("marker is required (one per sweep)")
	}
	if strings.IndexFunc(m, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("marker %q must be printable without spaces", m)
	}
	return nil
}

// graceTicks converts a grace period to the scripts' 0.1 s ticks.
func graceTicks(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + 99*time.Millisecond) / (100 * time.Millisecond))
}

// pidfilePath is where Start records a process.
func pidfilePath(spec ProcSpec) string { return stateFile(spec, ".pid") }

// stateFile is <StateDir>/<Name><ext>.
func stateFile(spec ProcSpec, ext string) string {
	return strings.TrimRight(spec.StateDir, "/") + "/" + spec.Name + ext
}

// validateSpec checks a ProcSpec and fills defaults.
func validateSpec(spec ProcSpec) (ProcSpec, error) {
	if !nameRe.MatchString(spec.Name) {
		return spec, fmt.Errorf("process name %q: use letters, digits, '.', '_' and '-'", spec.Name)
	}
	if strings.TrimSpace(spec.Command) == "" {
		return spec, fmt.Errorf("process %s: empty command", spec.Name)
	}
	if spec.StateDir == "" {
		return spec, fmt.Errorf("process %s: StateDir is required (it holds the pidfile)", spec.Name)
	}
	if err := checkMarker(spec.Marker); err != nil {
		return spec, fmt.Errorf("process %s: %w", spec.Name, err)
	}
	spec.LogPath = cmp.Or(spec.LogPath, stateFile(spec, ".log"))
	for _, p := range []string{spec.StateDir, spec.LogPath, spec.Dir} {
		if strings.ContainsAny(p, "\x00\n") {
			return spec, fmt.Errorf("process %s: path %q contains a NUL or newline", spec.Name, p)
		}
	}
	for i, e := range spec.Env {
		if !envNameRe.MatchString(e.Name) || e.Name == "MBENCH_MARKER" || e.Name == procTagEnv {
			return spec, fmt.Errorf("process %s: env[%d]: invalid variable name %q", spec.Name, i, e.Name)
		}
		if strings.ContainsRune(e.Value, 0) {
			return spec, fmt.Errorf("process %s: env %s: value contains a NUL byte", spec.Name, e.Name)
		}
	}
	if spec.TetherGrace <= 0 {
		spec.TetherGrace = 5 * time.Second
	}
	return spec, nil
}

// startScript is the monitor script of Host.Start. It prints "TAG error: …",
// or "TAG started PID STARTTIME" and later "TAG exited STATUS"; the per-start
// TAG keeps a login shell's chatter from being taken for a report. The body
// is a function called on the last line, so a truncated script runs nothing.
func startScript(spec ProcSpec, tether bool, tag string) string {
	var b strings.Builder
	b.WriteString(shLib)
	b.WriteString("mb_main() {\nmb_tag=" + shquote.Quote(tag) + "\n")
	fmt.Fprintf(&b, "mb_pidf=%s\nmb_log=%s\n", quotePath(pidfilePath(spec)), quotePath(spec.LogPath))
	logDir := cmp.Or(spec.LogPath[:strings.LastIndex(spec.LogPath, "/")+1], ".")
	fmt.Fprintf(&b, `mkdir -p -- %s %s || { echo "$mb_tag error: cannot create the state or log directory"; return; }`+"\n",
		quotePath(spec.StateDir), quotePath(logDir))
	b.WriteString(`: >> "$mb_log" || { echo "$mb_tag error: cannot write the log file"; return; }` + "\n")
	if spec.Dir != "" {
		fmt.Fprintf(&b, `cd -- %s || { echo "$mb_tag error: cannot change to the working directory"; return; }`+"\n", quotePath(spec.Dir))
	}
	// Asynchronous lists start with SIGINT and SIGQUIT ignored; env
	// --default-signal (coreutils >= 8.31) restores them where available.
	b.WriteString("mb_ds=\nenv --default-signal=INT true 2>/dev/null && mb_ds='env --default-signal=INT,QUIT'\n")
	// The child records itself in the pidfile before it leaves the
	// monitor's process group (setsid): until then, killing the monitor's
	// group (a cancelled Start, AbortStarts) kills it; from then on, the
	// pidfile names it. No instant exists at which the engine can outlive
	// mbench unrecorded. The pid and start time come from /proc/self/stat,
	// read by the subshell itself.
	b.WriteString(`exec 3<&0
( mb_s=; { read -r mb_s < /proc/self/stat; } 2>/dev/null
mb_stat "${mb_s%% *}" || exit 126
{ printf '%s %s\n' "${mb_s%% *}" "$mb_start" > "$mb_pidf.tmp" && mv -f -- "$mb_pidf.tmp" "$mb_pidf"; } 2>/dev/null || exit 126
export MBENCH_MARKER=` + shquote.Quote(spec.Marker) + "; export " + procTagEnv + "=" + shquote.Quote(procTag(spec.Marker, spec.Name)))
	for _, e := range spec.Env {
		b.WriteString("; export " + e.Name + "=" + shquote.Quote(e.Value))
	}
	b.WriteString("\nexec $mb_ds setsid sh -c " + shquote.Quote(spec.Command) + `
) 3<&- </dev/null >>"$mb_log" 2>&1 &
mb_pid=$!
`)
	if tether {
		// The watcher exists from the fork on (nothing is written to stdout
		// before it starts, so a dropped link cannot kill the monitor
		// first). On stdin EOF (after "exited", or on a lost link) it waits
		// until the child has left the monitor's group or died, then kills
		// whatever the group holds.
		fmt.Fprintf(&b, `( mb_stat "$mb_pid"; mb_t0=$mb_start; cat <&3 >/dev/null 2>&1; mb_settle "$mb_pid"; mb_kill "$mb_pid" "$mb_t0" %s %d %s ) >/dev/null 2>&1 &
`, shquote.Quote(spec.Marker), graceTicks(spec.TetherGrace), shquote.Quote(procTag(spec.Marker, spec.Name)))
	}
	b.WriteString(`mb_settle "$mb_pid"
mb_fp=; mb_start=; { read -r mb_fp mb_start < "$mb_pidf"; } 2>/dev/null
if [ "$mb_fp" != "$mb_pid" ]; then
	kill -s KILL "$mb_pid" 2>/dev/null; wait "$mb_pid"
	echo "$mb_tag error: cannot write the pidfile"; return
fi
if mb_stat "$mb_pid" && [ "$mb_pgrp" != "$mb_pid" ] && [ "$mb_state" != Z ]; then
	kill -s KILL "$mb_pid" 2>/dev/null; wait "$mb_pid"
	echo "$mb_tag error: the process did not become a session leader (is setsid installed?)"; return
fi
echo "$mb_tag started $mb_pid $mb_start"
exec 3<&-
wait "$mb_pid"; mb_rc=$?
echo "$mb_tag exited $mb_rc"
}
mb_main
`)
	return b.String()
}
