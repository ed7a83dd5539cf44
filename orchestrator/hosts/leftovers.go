package hosts

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// Leftover is a process recorded in a pidfile that is still ours: its group
// is alive and carries the sweep's marker (and, while the leader lives, the
// leader's start time matches the pidfile, so a reused pid is never taken).
type Leftover struct {
	Name      string // pidfile base name without ".pid"
	PidFile   string // path on the host
	Pid       int    // pid = process group id
	StartTime string // /proc/<pid>/stat field 22 recorded at start
	Members   []int  // live processes of the group when scanned
}

// FindLeftovers lists the pidfiles under stateDir whose process group is still
// alive and ours (see Leftover). It changes nothing.
func FindLeftovers(ctx context.Context, h Host, stateDir, marker string) ([]Leftover, error) {
	if err := checkStateDir(stateDir); err != nil {
		return nil, err
	}
	return leftoverScan(ctx, h, stateDir, marker, false, 0)
}

// StopLeftovers stops every leftover under stateDir (SIGTERM to the group,
// SIGKILL after grace, verified) and removes its pidfile; it also removes
// pidfiles whose process group is entirely gone. Pidfiles naming a live
// process that is not ours are left alone. It returns what it stopped.
func StopLeftovers(ctx context.Context, h Host, stateDir, marker string, grace time.Duration) ([]Leftover, error) {
	if err := checkStateDir(stateDir); err != nil {
		return nil, err
	}
	return leftoverScan(ctx, h, stateDir, marker, true, grace)
}

func checkStateDir(d string) error {
	if d == "" {
		return errors.New("leftovers: empty state directory")
	}
	return checkPath(d)
}

// leftoverScan runs the scan over a state dir, or over one file when target
// ends in ".pid".
func leftoverScan(ctx context.Context, h Host, target, marker string, stop bool, grace time.Duration) ([]Leftover, error) {
	if err := checkMarker(marker); err != nil {
		return nil, fmt.Errorf("leftovers in %s on %s: %w", target, h.Name(), err)
	}
	var files string
	if strings.HasSuffix(target, ".pid") {
		files = quotePath(target)
	} else {
		files = quotePath(strings.TrimRight(target, "/")) + "/*.pid"
	}
	script := shLib + fmt.Sprintf(`mb_join() { mb_mem=; for mb_x in $mb_list; do mb_mem="${mb_mem:+$mb_mem,}$mb_x"; done; : "${mb_mem:=-}"; }
mb_one() {
	mb_fp=; mb_fs=
	{ read -r mb_fp mb_fs < "$1"; } 2>/dev/null
	case "$mb_fp" in ''|*[!0-9]*) echo "bad - - - $1"; return;; esac
	if mb_ours "$mb_fp" "$mb_fs" %[1]s; then
		mb_members "$mb_fp"; mb_join
		if [ %[2]d = 1 ]; then
			if mb_kill "$mb_fp" "$mb_fs" %[1]s %[3]d; then rm -f -- "$1"; echo "stopped $mb_fp $mb_fs $mb_mem $1"
			else mb_join; echo "survivors $mb_fp $mb_fs $mb_mem $1"; fi
		else echo "ours $mb_fp $mb_fs $mb_mem $1"; fi
	elif [ %[2]d = 1 ]; then
		if ! { mb_stat "$mb_fp" && [ "$mb_state" != Z ]; }; then
			mb_members "$mb_fp"; [ -z "$mb_list" ] && rm -f -- "$1"
		fi
	fi
}
for mb_pf in %[4]s; do [ -f "$mb_pf" ] && mb_one "$mb_pf"; done
exit 0
`, quote(marker), b2i(stop), graceTicks(grace), files)
	out, _, err := h.Run(ctx, script)
	if err != nil {
		return nil, fmt.Errorf("leftovers in %s on %s: %w", target, h.Name(), err)
	}
	var res []Leftover
	var survivors []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, " ", 5)
		if len(f) != 5 || (f[0] != "ours" && f[0] != "stopped" && f[0] != "survivors") {
			continue
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		l := Leftover{Name: strings.TrimSuffix(path.Base(f[4]), ".pid"), PidFile: f[4], Pid: pid, StartTime: f[2]}
		for _, m := range strings.Split(f[3], ",") {
			if n, err := strconv.Atoi(m); err == nil {
				l.Members = append(l.Members, n)
			}
		}
		if f[0] == "survivors" {
			survivors = append(survivors, fmt.Sprintf("%s (pgid %d: %s)", l.Name, pid, f[3]))
			continue
		}
		res = append(res, l)
	}
	if len(survivors) > 0 {
		return res, fmt.Errorf("leftovers in %s on %s: still alive after SIGKILL: %s", target, h.Name(), strings.Join(survivors, "; "))
	}
	return res, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
