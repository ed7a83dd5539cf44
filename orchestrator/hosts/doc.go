// Package hosts owns how mbench runs things on a machine: the Host seam with a
// local implementation (NewLocal) and an SSH implementation (DialSSH, built on
// golang.org/x/crypto/ssh), and the lifecycle of the long-lived engine
// processes started there. A Slurm host (AllocateSlurm: slurm.go for the
// sbatch and srun lines, slurm_alloc.go for the allocation's life, from
// pending to COMPLETED, slurm_step.go for its job steps) runs its commands
// on a login machine (a local or SSH Host) and its processes as job steps
// on the allocation's nodes; callers reach the nodes through the NodeHost
// capability (node.go), never through the Slurm type.
//
// Both implementations share one code path: every operation is a POSIX sh
// script executed through a small transport (a local `sh` child, or an SSH
// session on the host's connection; a second connection is opened only when
// sshd's MaxSessions is reached). Only the transport differs, so the tests
// that run against the local machine exercise the same scripts that run on a
// GPU host.
//
// Process lifecycle (Host.Start):
//
//   - the command runs under setsid, so its pid is also its process group and
//     session id; stdin is /dev/null and stdout+stderr are appended to
//     ProcSpec.LogPath on the host;
//   - the environment gets MBENCH_MARKER=<ProcSpec.Marker>,
//     MBENCH_PROC=<Marker>/<Name> (the process's tag, which every process it
//     starts inherits) plus ProcSpec.Env.
//     Values travel inside the script, which is sent on stdin, so they never
//     appear on a command line (ps) or in an error message;
//   - "<StateDir>/<Name>.pid" holds "<pid> <starttime>" (starttime is field 22
//     of /proc/<pid>/stat), written atomically by the process itself before
//     it calls setsid: until then it dies with the launcher's process group,
//     so no instant exists at which it runs unrecorded (AbortStarts kills the
//     launches under way); StopLeftovers uses the pidfile,
//     with the marker, to find engines a crashed sweep left behind without
//     ever signalling a process that merely reuses a pid;
//   - a monitor shell stays attached (the waiting session) and reports the exit
//     status; over SSH with ProcSpec.Tether a watcher, started right after the
//     fork, kills the process group when stdin reaches EOF, that is when the
//     connection drops or mbench dies;
//   - Process.Stop sends SIGTERM to the process's tree, waits, sends SIGKILL,
//     and verifies that nothing of the tree lives: the tree is the group, the
//     processes that carry the tag, and every descendant of either, so a
//     child that called setsid (as Ray's workers do) is found by its parent
//     while that lives, and by its tag once re-parented. Stops and leftover
//     scans read the process table from Go (procOps): locally /proc directly,
//     remotely one command per poll; the waits are deadlines, not tick counts.
//
// Remote hosts must be Linux (the scripts read /proc) with sh, setsid
// (util-linux), dd, tail, tr, awk and GNU grep.
//
// Subpackage sshdtest starts a real OpenSSH sshd, or an in-process SSH server,
// on loopback for tests; netnstest gives tests the multi-host test bed of
// .ci/netns-up.sh (network namespaces with their own sshd, and a Slurm
// cluster whose nodes are namespaces).
package hosts
