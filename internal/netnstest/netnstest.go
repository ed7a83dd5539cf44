// Package netnstest gives tests the multi-host test bed that .ci/netns-up.sh
// builds on one machine: network namespaces joined by a bridge, each a host
// with its own network stack, hostname and sshd, three of them the nodes of
// a Slurm cluster (slurmd in each) whose controller runs in the test's own
// namespace, beside the one-node cluster of .ci/slurm-up.sh. Tests that
// need it call Require, or RequireHosts where they use its SSH hosts alone:
// without the bed they skip, or fail when MBENCH_REQUIRE_NETNS=1 (as in CI). The namespaces' addresses are the only
// non-loopback addresses tests send to.
package netnstest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BedFile is where .ci/netns-up.sh describes the bed.
const BedFile = "/var/lib/mbench-netns/bed.json"

// Machine is one namespace host: its name (hostname, namespace and, for a
// node, Slurm's NodeName) and its address on the bridge.
type Machine struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
	GPUs int    `json:"gpus"`
	CPUs int    `json:"cpus"`
}

// Bed is the test bed as .ci/netns-up.sh wrote it.
type Bed struct {
	Version   string `json:"version"`
	LoginAddr string `json:"login_addr"` // this machine on the bridge
	SlurmConf string `json:"slurm_conf"` // SLURM_CONF of the bed's cluster, here
	Partition string `json:"partition"`
	SSH       struct {
		User       string `json:"user"`
		Port       int    `json:"port"`
		ClientKey  string `json:"client_key"`
		KnownHosts string `json:"known_hosts"`
		SSHConfig  string `json:"ssh_config"`
	} `json:"ssh"`
	Nodes []Machine `json:"nodes"` // Slurm nodes (each also has an sshd)
	Hosts []Machine `json:"hosts"` // SSH hosts
}

// lockFile serializes the tests that use the bed, across test packages
// (go test runs packages at once): one fails a node, another counts the
// steps of its job, and none may see another's.
const lockFile = "/var/lib/mbench-netns/tests.lock"

// Require returns the bed, after checking that its cluster answers with
// every node up, and holds it for the test (other tests that Require it
// wait). Without it the test is skipped, or fails under
// MBENCH_REQUIRE_NETNS=1.
func Require(t testing.TB) *Bed {
	t.Helper()
	return require(t, lockFile, (*Bed).check)
}

// hostsLockFile serializes the tests that use the bed's SSH hosts alone
// (RequireHosts). They run beside the cluster's tests (Require), which
// fail nodes and count their jobs' steps but change nothing of the hosts
// that another test could see.
const hostsLockFile = "/var/lib/mbench-netns/hosts.lock"

// RequireHosts returns the bed for a test that uses its SSH hosts and no
// node of its cluster, after checking that each host's namespace exists,
// and holds the hosts for the test (other tests that RequireHosts wait;
// those that Require the bed run beside it). Without the bed the test is
// skipped, or fails under MBENCH_REQUIRE_NETNS=1.
func RequireHosts(t testing.TB) *Bed {
	t.Helper()
	return require(t, hostsLockFile, func(b *Bed) error { return namespacesExist(b.Hosts) })
}

// require loads the bed, holds lock for t and checks the bed with check;
// without the bed it skips t, or fails it under MBENCH_REQUIRE_NETNS=1.
func require(t testing.TB, lock string, check func(*Bed) error) *Bed {
	t.Helper()
	b, err := load()
	if err == nil {
		err = holdFile(t, lock)
	}
	if err == nil {
		err = check(b)
	}
	if err != nil {
		if os.Getenv("MBENCH_REQUIRE_NETNS") == "1" {
			t.Fatalf("netnstest: MBENCH_REQUIRE_NETNS=1 but the namespace test bed is not up (run .ci/netns-up.sh as root): %v", err)
		}
		t.Skipf("netnstest: no namespace test bed here (.ci/netns-up.sh builds it; MBENCH_REQUIRE_NETNS=1 fails instead): %v", err)
	}
	return b
}

// holdFile takes an exclusive lock on the file lock until the test ends.
func holdFile(t testing.TB, lock string) error {
	f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return fmt.Errorf("lock %s: %w", lock, err)
	}
	t.Cleanup(func() { f.Close() }) // releases the lock
	return nil
}

func load() (*Bed, error) {
	data, err := os.ReadFile(BedFile)
	if err != nil {
		return nil, err
	}
	var b Bed
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%s: %w", BedFile, err)
	}
	if len(b.Nodes) < 2 || len(b.Hosts) < 3 || b.SlurmConf == "" {
		return nil, fmt.Errorf("%s: %d nodes and %d hosts, want at least 2 and 3", BedFile, len(b.Nodes), len(b.Hosts))
	}
	return &b, nil
}

// check asks the bed's cluster whether every node is up, and each
// namespace whether it exists.
func (b *Bed) check() error {
	if err := namespacesExist(b.Machines()); err != nil {
		return err
	}
	out, err := b.Slurm("sinfo", "-h", "-N", "-o", "%N %t")
	if err != nil {
		return fmt.Errorf("sinfo: %v: %s", err, out)
	}
	for _, n := range b.Nodes {
		if up := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(n.Name) + ` (idle|mix|alloc|comp)`); !up.MatchString(out) {
			return fmt.Errorf("node %s is not up: %s", n.Name, out)
		}
	}
	return nil
}

// namespacesExist checks that each machine's network namespace exists.
func namespacesExist(ms []Machine) error {
	for _, m := range ms {
		if _, err := os.Stat(filepath.Join("/run/netns", m.Name)); err != nil {
			return err
		}
	}
	return nil
}

// Env is what a process here needs to use the bed's cluster.
func (b *Bed) Env() []string { return []string{"SLURM_CONF=" + b.SlurmConf} }

// Slurm runs a Slurm command against the bed's cluster and returns its
// combined output.
func (b *Bed) Slurm(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), b.Env()...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// JobState is the job's state in the bed's cluster ("" once purged).
func (b *Bed) JobState(job string) string {
	out, err := b.Slurm("squeue", "-h", "-t", "all", "-j", job, "-o", "%T")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// Steps lists the steps of a job in the bed's cluster, but its batch step.
func (b *Bed) Steps(job string) []string {
	out, _ := b.Slurm("squeue", "-h", "-s", "-j", job, "-o", "%i")
	var s []string
	for _, f := range strings.Fields(out) {
		if !strings.HasSuffix(f, ".batch") && !strings.HasSuffix(f, ".extern") {
			s = append(s, f)
		}
	}
	return s
}

// WaitJobState waits up to d for the job to reach one of states and
// returns the last state seen.
func (b *Bed) WaitJobState(job string, d time.Duration, states ...string) string {
	st := b.JobState(job)
	for end := time.Now().Add(d); !slices.Contains(states, st) && time.Now().Before(end); st = b.JobState(job) {
		time.Sleep(100 * time.Millisecond)
	}
	return st
}

// SSHHomeDir writes a home directory whose ~/.ssh reaches every bed
// machine by name (mbn-h1, mbn-n1, …) with the bed's client key and host
// keys, and returns it, for a test that gives it to the processes it starts
// (HOME=, and an empty SSH_AUTH_SOCK).
func (b *Bed) SSHHomeDir(t testing.TB) string {
	t.Helper()
	home := t.TempDir()
	dir := filepath.Join(home, ".ssh")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{b.SSH.SSHConfig: "config", b.SSH.KnownHosts: "known_hosts"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

// Machines are every namespace host of the bed: the nodes, then the hosts.
func (b *Bed) Machines() []Machine { return append(slices.Clone(b.Nodes), b.Hosts...) }

// netnsNames maps the network namespace identity of each bed machine
// ("net:[inode]", as /proc/<pid>/ns/net reads) to its name, and this test's
// own namespace to "".
func (b *Bed) netnsNames() map[string]string {
	ids := map[string]string{}
	if id, err := os.Readlink("/proc/self/ns/net"); err == nil {
		ids[id] = ""
	}
	for _, m := range b.Machines() {
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/run/netns", m.Name), &st) == nil {
			ids[fmt.Sprintf("net:[%d]", st.Ino)] = m.Name
		}
	}
	return ids
}

// Marked lists, by machine name ("" for this machine's own namespace), the
// live processes whose environment carries MBENCH_MARKER=marker: what a
// sweep has running on each machine of the bed.
func (b *Bed) Marked(marker string) map[string][]int {
	ids := b.netnsNames()
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p := "/proc/" + e.Name()
		if st, _ := os.ReadFile(p + "/stat"); len(st) == 0 || strings.Contains(string(st), ") Z ") {
			continue
		}
		env, _ := os.ReadFile(p + "/environ")
		if !slices.Contains(strings.Split(string(env), "\x00"), "MBENCH_MARKER="+marker) {
			continue
		}
		ns, _ := os.Readlink(p + "/ns/net")
		name, ok := ids[ns]
		if !ok {
			name = "?" + ns
		}
		out[name] = append(out[name], pid)
	}
	return out
}

// NothingLeft fails the test unless, within d, no process of the sweep
// (marker) lives on any machine of the bed or here.
func (b *Bed) NothingLeft(t testing.TB, marker string, d time.Duration) {
	t.Helper()
	left := b.Marked(marker)
	for end := time.Now().Add(d); len(left) > 0 && time.Now().Before(end); left = b.Marked(marker) {
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("processes of sweep %s still alive: %v (machine: pids)", marker, left)
	}
}

// NetnsOf is the bed machine whose network namespace pid runs in ("" for
// this machine's own, "?" for none of them).
func (b *Bed) NetnsOf(pid int) string {
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if name, ok := b.netnsNames()[ns]; err == nil && ok {
		return name
	}
	return "?"
}
