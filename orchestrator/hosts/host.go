package hosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Host runs commands, long-lived processes and file transfers on one machine.
// Implementations: NewLocal and DialSSH. All methods are safe for concurrent use.
type Host interface {
	// Name is the host's name as the matrix spells it.
	Name() string
	// Run executes cmd with `sh -c` and returns its output. Cancelling ctx
	// kills the command's whole process group. A non-zero exit is an *ExitError.
	Run(ctx context.Context, cmd string) (stdout, stderr []byte, err error)
	// Start launches a long-lived process (see ProcSpec). ctx bounds the launch
	// only; the process lives until it exits or is stopped.
	Start(ctx context.Context, spec ProcSpec) (Process, error)
	// Put writes data to remotePath atomically (temporary file, then rename),
	// creating the parent directory, and sets mode.
	Put(ctx context.Context, data io.Reader, remotePath string, mode os.FileMode) error
	// Get copies remotePath from byte offset on to w and returns the bytes copied.
	Get(ctx context.Context, remotePath string, offset int64, w io.Writer) (int64, error)
	// Size returns the size of remotePath, or -1 and an error wrapping
	// fs.ErrNotExist when it does not exist.
	Size(ctx context.Context, remotePath string) (int64, error)
	// Forward returns a local 127.0.0.1:port address whose connections reach
	// remoteAddr as seen from the host. For the local host it returns
	// remoteAddr unchanged. The listener lives until ctx is done or Close.
	Forward(ctx context.Context, remoteAddr string) (localAddr string, err error)
	// Close releases the host's connection. Tethered remote processes die with it.
	Close() error
}

// Env is one environment variable for a started process. Values are secret:
// they are never put on a command line or into an error message.
type Env struct {
	Name  string
	Value string
}

// ProcSpec describes a long-lived process for Host.Start.
type ProcSpec struct {
	// Name identifies the process; the pidfile is <StateDir>/<Name>.pid.
	// Letters, digits, '.', '_' and '-' only.
	Name string
	// Command is a shell command line, run with `sh -c` under setsid. Values in
	// it must already be shell-quoted by the caller.
	Command string
	// Env is added to the host's default environment.
	Env []Env
	// Dir is the working directory; "" keeps the host shell's (usually $HOME).
	Dir string
	// LogPath receives stdout and stderr (appended); "" means <StateDir>/<Name>.log.
	LogPath string
	// StateDir holds the pidfile (required). A leading "~/" means $HOME.
	StateDir string
	// Marker is exported as MBENCH_MARKER and identifies the process as ours
	// (required; printable, no spaces). Use one marker per sweep.
	Marker string
	// Tether kills the process when the SSH connection drops or mbench dies.
	// Ignored by the local host: local engines outlive a killed mbench and are
	// found again through their pidfiles.
	Tether bool
	// TetherGrace is the SIGTERM→SIGKILL grace of the tether; 0 means 5 s.
	TetherGrace time.Duration
	// GPUs is how many GPUs Slurm binds to the process's job step; hosts
	// other than Slurm ignore it (their GPUs come in Env).
	GPUs int
	// Node is the index of the node of a Slurm allocation the process's
	// step runs on; hosts other than Slurm ignore it.
	Node int
}

// Process is a handle on a process started by Host.Start.
type Process interface {
	// Pid is the process id, which is also its process group and session id.
	Pid() int
	// Done is closed when the process (the group leader) has exited, or when
	// it can no longer be observed (the SSH connection was lost: Err wraps
	// ErrConnectionLost). Call Stop afterwards anyway: it kills what the
	// leader left in its group and removes the pidfile.
	Done() <-chan struct{}
	// Err is nil while running; once Done, the exit status as an *ExitError
	// (Code 128+n for signal n, e.g. 143 after SIGTERM), nil for exit 0, or
	// an error wrapping ErrConnectionLost.
	Err() error
	// Stop sends SIGTERM to the process group, SIGKILL after grace, verifies
	// that no process of the group survives, and removes the pidfile. grace is
	// shortened so that the SIGKILL still happens before ctx's deadline.
	Stop(ctx context.Context, grace time.Duration) error
	// LogTail returns the last n lines of the process log, or a note saying
	// why it could not be read.
	LogTail(ctx context.Context, n int) string
}

// ExitError reports a command that ran and exited with a non-zero status.
type ExitError struct {
	Code   int    // exit status; 128+n when killed by signal n
	Stderr []byte // the command's stderr (Run only)
}

// Error gives the status and the start of stderr.
func (e *ExitError) Error() string {
	msg := "exit status " + strconv.Itoa(e.Code)
	if e.Code > 128 && e.Code < 128+65 {
		msg += fmt.Sprintf(" (signal %d)", e.Code-128)
	}
	if s := strings.TrimSpace(string(e.Stderr)); s != "" {
		if len(s) > 500 {
			s = s[:500] + "…"
		}
		msg += ": " + s
	}
	return msg
}

// ErrConnectionLost is wrapped by errors caused by a lost SSH connection.
var ErrConnectionLost = errors.New("ssh connection lost")

// ErrHostUnreachable is wrapped by the error of a host that no attempt of
// a reconnection reached: the host has stopped answering, as opposed to a
// connection that broke and was made again.
var ErrHostUnreachable = errors.New("host stopped answering")

// UnreachableError is the error of a host that stopped answering, naming
// it as the matrix does; it wraps ErrHostUnreachable.
type UnreachableError struct {
	Host string // the host's name in the matrix
	Err  error
}

func (e *UnreachableError) Error() string { return e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// transport executes sh command lines on a machine. Everything else is shared.
type transport interface {
	// exec runs cmd (a POSIX sh command line). With stdin nil, cancelling ctx
	// kills cmd's process group; with stdin set, cancelling abandons it.
	exec(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) error
	// open starts cmd with its stdin and stdout attached, for monitors.
	open(ctx context.Context, cmd string) (*stream, error)
	// canTether says whether stdin EOF of a stream means mbench went away.
	canTether() bool
	forward(ctx context.Context, remoteAddr string) (string, error)
	close() error
}

// stream is a running command with attached pipes.
type stream struct {
	stdin  io.WriteCloser
	stdout io.Reader
	stderr *bytes.Buffer // only read after wait returns
	wait   func() error  // waits for the command; errors wrap ErrConnectionLost where apt
	kill   func()        // abandons the command (closes the session / kills the monitor)
}

// host implements Host on top of a transport.
type host struct {
	name   string
	t      transport
	ops    procOps // how stops and leftover scans see processes
	closed atomic.Bool
}

func (h *host) Name() string { return h.name }

func (h *host) Close() error {
	if h.closed.Swap(true) {
		return nil
	}
	return h.t.close()
}

func (h *host) Run(ctx context.Context, cmd string) ([]byte, []byte, error) {
	if strings.ContainsRune(cmd, 0) {
		return nil, nil, fmt.Errorf("run on %s: command contains a NUL byte", h.name)
	}
	var out, errb bytes.Buffer
	err := h.t.exec(ctx, cmd, nil, &out, &errb)
	if ee, ok := err.(*ExitError); ok {
		ee.Stderr = errb.Bytes()
	}
	return out.Bytes(), errb.Bytes(), err
}

func (h *host) Forward(ctx context.Context, remoteAddr string) (string, error) {
	return h.t.forward(ctx, remoteAddr)
}

func (h *host) Put(ctx context.Context, data io.Reader, remotePath string, mode os.FileMode) error {
	if err := checkPath(remotePath); err != nil {
		return err
	}
	dir, base := path.Split(remotePath)
	if base == "" {
		return fmt.Errorf("put %s:%s: path names a directory", h.name, remotePath)
	}
	tmp := remotePath + ".mbench-tmp-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	mk := ""
	if dir != "" {
		mk = "mkdir -p -- " + quotePath(dir) + " && "
	}
	sent := &countingWriter{w: io.Discard}
	var errb bytes.Buffer
	err := h.t.exec(ctx, "umask 077 && "+mk+"cat > "+quotePath(tmp), io.TeeReader(data, sent), io.Discard, &errb)
	if err == nil {
		finish := fmt.Sprintf(`n=$(wc -c < %[1]s) && [ "$n" -eq %[2]d ] && chmod %[3]o %[1]s && mv -f -- %[1]s %[4]s`,
			quotePath(tmp), sent.n, mode.Perm(), quotePath(remotePath))
		_, _, err = h.Run(ctx, finish)
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _, _ = h.Run(cctx, "rm -f -- "+quotePath(tmp))
		if ee, ok := err.(*ExitError); ok && len(ee.Stderr) == 0 {
			ee.Stderr = errb.Bytes()
		}
		return fmt.Errorf("put %s:%s: %w", h.name, remotePath, err)
	}
	return nil
}

func (h *host) Get(ctx context.Context, remotePath string, offset int64, w io.Writer) (int64, error) {
	if err := checkPath(remotePath); err != nil {
		return 0, err
	}
	if offset < 0 {
		return 0, fmt.Errorf("get %s:%s: negative offset %d", h.name, remotePath, offset)
	}
	cw := &countingWriter{w: w}
	var errb bytes.Buffer
	cmd := fmt.Sprintf("[ -f %[1]s ] || exit 3; echo %[3]s; tail -c +%[2]d -- %[1]s", quotePath(remotePath), offset+1, dataMarker)
	err := h.t.exec(ctx, cmd, nil, &afterMarker{w: cw}, &errb)
	if ee, ok := err.(*ExitError); ok {
		if ee.Code == 3 {
			return cw.n, fmt.Errorf("get %s:%s: %w", h.name, remotePath, fs.ErrNotExist)
		}
		ee.Stderr = errb.Bytes()
	}
	if err != nil {
		return cw.n, fmt.Errorf("get %s:%s: %w", h.name, remotePath, err)
	}
	return cw.n, nil
}

func (h *host) Size(ctx context.Context, remotePath string) (int64, error) {
	if err := checkPath(remotePath); err != nil {
		return -1, err
	}
	out, _, err := h.Run(ctx, fmt.Sprintf("[ -f %[1]s ] || exit 3; wc -c < %[1]s", quotePath(remotePath)))
	if ee, ok := err.(*ExitError); ok && ee.Code == 3 {
		return -1, fmt.Errorf("size %s:%s: %w", h.name, remotePath, fs.ErrNotExist)
	}
	if err != nil {
		return -1, fmt.Errorf("size %s:%s: %w", h.name, remotePath, err)
	}
	n, err := strconv.ParseInt(LastLine(out), 10, 64)
	if err != nil {
		return -1, fmt.Errorf("size %s:%s: unexpected wc output %q", h.name, remotePath, out)
	}
	return n, nil
}

// checkPath refuses paths that cannot be passed to the scripts safely.
func checkPath(p string) error {
	if p == "" {
		return errors.New("empty path")
	}
	if strings.ContainsAny(p, "\x00\n") {
		return fmt.Errorf("path %q contains a NUL or newline", p)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// dataMarker precedes file data on Get's stdout, so that anything a noisy
// login shell rc file prints before it is not taken for data.
const dataMarker = "mbench-data-begin"

// afterMarker passes on what follows the first dataMarker line.
type afterMarker struct {
	w     io.Writer
	buf   []byte
	found bool
}

func (a *afterMarker) Write(p []byte) (int, error) {
	if a.found {
		return a.w.Write(p)
	}
	a.buf = append(a.buf, p...)
	i := bytes.Index(a.buf, []byte(dataMarker+"\n"))
	if i < 0 {
		if len(a.buf) > 1<<20 {
			return 0, errors.New("no data marker in the first MiB of output")
		}
		return len(p), nil
	}
	a.found = true
	rest := a.buf[i+len(dataMarker)+1:]
	a.buf = nil
	if len(rest) > 0 {
		if _, err := a.w.Write(rest); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// LastLine is the last non-empty line of a command's output, trimmed (a
// chatty login shell may print before it).
func LastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
