package matrices

import (
	"time"

	"github.com/mbench/mbench/openloop"
	"github.com/mbench/mbench/results"
)

// Matrix is a loaded, validated and defaulted experiment matrix.
type Matrix struct {
	File      string          // path the matrix was read from (as given)
	Name      string          // [A-Za-z0-9_.-]+
	Seed      int64           // sweep seed
	Hosts     map[string]Host // by host name; default {local: {address: local}}
	HostOrder []string        // host names in file order
	Engine    Engine          // how instances are launched
	Configs   map[string]*Config
	// ConfigOrder is the config names in file order.
	ConfigOrder []string
	Rates       []float64        // req/s (rate multipliers for trace shapes), file order
	Shapes      []openloop.Shape // file order, unique names
	// Arrival is the arrival process of every cell: Process is also
	// ArrivalBurst (parse_loadgen.go), and with process concurrency (a
	// closed loop) the in-flight levels (in_flight) are the matrix's
	// Rates, a cell's Rate its level (InFlight stays 0 here).
	Arrival     openloop.Arrival
	Measure     Measure
	Repeat      Repeat
	Baseline    string   // a config name (default: the first config)
	Compare     []string // metrics compared against the baseline
	Gate        Gate
	Probe       Probe
	ClassBounds [3]int       // request-class bounds in new tokens (class_bounds); zero = 5k/20k/50k (results.DefaultClassBounds)
	ClassBasis  string       // what a request's class is measured on (class_basis): ClassBasisAuto or a results.ClassBasis
	SLO         *results.SLO // per-request objective of goodput (the slo section, slo.go); nil = none
	// Endpoint is the API the load drives: completions (default) or chat
	// (parse_loadgen.go).
	Endpoint openloop.Endpoint
	Hash     string // hash of the resolved matrix (see Resolved)

	// Capacity makes the sweep a capacity search instead of fixed rates
	// (parse_capacity.go); nil for a fixed-rate sweep.
	Capacity *Capacity
	// Request is what every request carries beyond its prompt and length
	// (parse_request.go); nil: the defaults.
	Request *Request
	// Metadata is the user's record of the sweep (metadata: {key: value}),
	// kept in sweep.json and shown in the report's environment.
	Metadata map[string]string
	// Limits bound the sweep's size (limits.go); not part of the hash.
	Limits Limits

	lines    map[string]int    // field path → line, for errors found after Parse
	written  map[string]string // shape name → its trace or dataset path as written (cell ids)
	source   []byte            // the file as read
	secretAt map[yamlPos]bool  // where secret values stand in source
}

// Host is a machine engines run on.
type Host struct {
	Name          string
	Address       string // "local", an ssh alias, or [user@]host[:port]
	GPUs          []int  // GPU indices instances may use, in assignment order
	HostKeyPolicy string // strict (default) | accept-new | insecure
	Tunnel        bool   // reach instances through SSH local port forwarding
	Workdir       string // default "~/.mbench"
	MbenchPath    string // mbench binary on the host ("" = the orchestrator decides)
	Slurm         *Slurm // allocated by Slurm (parse_slurm.go); Address is then ""
	// ConnectTimeout bounds one SSH connection attempt, TCP connect and
	// handshake (connect_timeout; 0 = 15 s); a host that answers none of a
	// reconnection's 5 attempts is lost. Not part of the hash.
	ConnectTimeout time.Duration
}

// IsLocal reports whether the host is this machine.
func (h Host) IsLocal() bool { return h.Address == "local" }

// EnvValue is one env value as written: a template, possibly secret.
type EnvValue struct {
	Value  string
	Secret bool // secret: true, or the name matches TOKEN|KEY|SECRET|PASSWORD
}

// EngineKind is what serves the requests: vLLM, llama.cpp's llama-server,
// or mbench's simulated engine (package engines holds what differs between
// them). Parse accepts only the kinds below.
type EngineKind string

// The engine kinds.
const (
	EngineVLLM     EngineKind = "vllm"     // vllm serve, launched by the command template
	EngineLlamaCpp EngineKind = "llamacpp" // llama.cpp's llama-server, launched by the command template
	EngineSim      EngineKind = "sim"      // mbench sim: a model of an engine, not vLLM
)

// EngineKinds lists the valid kinds.
var EngineKinds = []EngineKind{EngineVLLM, EngineLlamaCpp, EngineSim}

// Engine says how every instance of every config is launched.
type Engine struct {
	Kind         EngineKind          // vllm | llamacpp | sim
	Command      string              // command template (sim has a default)
	Model        string              // model path or id (sim default "sim-model")
	Env          map[string]EnvValue // templates, rendered per instance
	ReadyTimeout time.Duration       // default 5m
	Stagger      time.Duration       // delay between instance starts (default 0)
	Grace        time.Duration       // SIGTERM → SIGKILL (default 10s)
	Port         int                 // base port; instance i on a host gets Port+i (default 8000)
	Instrument   bool                // install the mbench_vllm step-timing plugin (vllm only)
	Restart      string              // on_change (default) | every_run
	Sim          map[string]string   // sim flags for every config (kind sim), by flag name
	// TokenIDs is the range prompt token ids are drawn from; unset, the
	// engine's vocabulary decides where it says its size (llamacpp), else
	// openloop.DefaultTokenRange.
	TokenIDs openloop.TokenRange
}

// Config is one engine configuration: a row of the comparison. A config
// with SameAs set (an A/A twin) carries a copy of its target's launch
// fields.
type Config struct {
	Name             string
	SameAs           string              // A/A twin of this config
	KVTransferConfig map[string]any      // rendered as --kv-transfer-config JSON (vllm)
	Args             []string            // extra engine args
	Env              map[string]EnvValue // templates, override engine env
	Sim              map[string]string   // sim flags for this config (kind sim)
	Topology         Topology
	BootstrapPort    int     // Mooncake bootstrap base port (+i per instance); 0 = none
	Router           *Router // load targets the router when set
	PD               *PD     // PD-separated topology (parse_pd.go); nil = every instance does both
}

// Topology places a config's instances.
type Topology struct {
	Hosts            []string // host names (default: every host, file order)
	InstancesPerHost int      // default 1
	GPUsPerInstance  int      // default 1
}

// Router is a process in front of the instances; the load targets it.
type Router struct {
	Command   string // template; {{.Targets}} lists the instances
	Host      string // default: the config's first host
	Port      int
	ReadyPath string // default /health
	Env       map[string]EnvValue
}

// Measure bounds one run.
type Measure struct {
	WarmupRequests int           // discarded (default 0)
	MinCompleted   int           // measured requests to complete (required)
	Timeout        time.Duration // cap on the measure phase (default 10m)
	DrainTimeout   time.Duration // default 1m
	// RequestTimeout fails a request that runs longer than this (error
	// class timeout); 0, the default, is none.
	RequestTimeout time.Duration
	AbortIf        openloop.AbortIf // stops a run early and marks it saturated; zero values are off
	// MaxErrorRate is the largest share of failed measured requests a run
	// may have and still be a result (default results.DefaultMaxErrorRate,
	// 1%); MaxErrorRateSet says the matrix set it (0 allows none).
	MaxErrorRate    float64
	MaxErrorRateSet bool
	// IncludeRamp measures the requests sent during arrival.ramp.
	IncludeRamp bool
	// AllowShortOutputs keeps runs whose fixed-length outputs the engine
	// cut short results (measure.allow_short_outputs; default false: such
	// a run is short_outputs).
	AllowShortOutputs bool
	// Percentiles are the percentiles of TTFT, TPOT, ITL and E2EL each
	// summary reports beyond p50, p90, p95 and p99 (measure.percentiles).
	Percentiles []float64
}

// Repeat is the stopping rule over randomized blocks.
type Repeat struct {
	Min, Max        int           // default 3, Min
	Metric          string        // default ttft_p90
	RelCI           float64       // target relative CI half-width (default 0.05)
	Confidence      float64       // default 0.95
	Budget          time.Duration // wall-clock budget, 0 = none
	OnlyUnconverged bool
	Randomize       bool // default true; false is a test-only switch
	FreshRestart    bool // restart the engine before every run
}

// Gate waits before each run until the GPUs are back to idle.
type Gate struct {
	Enabled         bool    // default true
	TempBandC       float64 // default 3
	Timeout         time.Duration
	MemToleranceMiB int // default 512
}

// Probe configures sampling during runs.
type Probe struct {
	Interval time.Duration // default 250ms
	Path     string        // metrics path scraped on instances ("" = /metrics)
	// ThrottleMaxFraction is the share of a run's window a GPU may spend
	// power or thermally throttled before the run is marked throttled
	// (default 0.1; 1 never marks).
	ThrottleMaxFraction float64
}

// DefaultThrottleMaxFraction is probe.throttle_max_fraction's default
// (probes.DefaultThrottleMaxFraction).
const DefaultThrottleMaxFraction = 0.1

// Cell is one (config, rate, shape) combination: its identity as sweep.json
// records it, whose Shape is the shape's name, and the shape itself.
type Cell struct {
	results.CellInfo
	Spec openloop.Shape // the shape CellInfo.Shape names
}

// Runtime supplies what only the orchestrator knows when rendering launches.
// Nil funcs and empty fields get placeholder defaults.
type Runtime struct {
	Self    func(host string) string               // mbench binary on the host
	StepLog func(host string, instance int) string // engine_step.jsonl path on the host
	Bind    string                                 // address engines bind (default 127.0.0.1)
	// Node is the name and routable address of node i of a slurm host's
	// allocation (ok false while it has none: placeholders are rendered).
	Node func(host string, i int) (name, addr string, ok bool)
}

// Launch is a config rendered into concrete processes.
type Launch struct {
	Key                          string // equal keys ⇒ the running engine can be reused
	Kind                         EngineKind
	Config                       string
	Instances                    []Instance
	Router                       *RouterLaunch
	ReadyTimeout, Stagger, Grace time.Duration
	Instrument                   bool // install the mbench_vllm plugin first
}

// Instance is one engine process.
type Instance struct {
	Host          string // host name
	Index         int    // instance index on its host
	Port          int
	GPUs          []int
	Command       string // shell command line
	Env           []EnvVar
	BootstrapPort int // 0 = none
	StepLog       string
	Role          string // RoleProducer or RoleConsumer in a PD topology, else ""
}

// RouterLaunch is the rendered router process.
type RouterLaunch struct {
	Host      string
	Port      int
	Command   string
	Env       []EnvVar
	ReadyPath string
}

// EnvVar is one rendered environment variable.
type EnvVar struct {
	Name, Value string
	Secret      bool
}
