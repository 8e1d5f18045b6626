// Package v8 runs compiled proxy-wasm modules on Node's V8 with the flags Envoy gives V8
// (--no-liftoff: TurboFan only; functions compiled lazily on first call), for the project's
// V8 tier: a smoke test of the filter on the engine Envoy uses and the start-up and guest-time
// benchmarks. The host itself is host.js (a small proxy-wasm host: worker VMs of one module,
// one shared-data store with Envoy's CAS rules, header maps, properties, metrics, local
// responses); this package writes it out, runs Node on a Job and decodes the Result.
//
// Node's V8 is older than Envoy's (Node 20 ships V8 11.3), so its numbers are indicative of,
// not equal to, Envoy's.
package v8

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

//go:embed host.js
var hostJS []byte

// Flags are the V8 flags Envoy starts V8 with (proxy-wasm-cpp-host's V8 runtime).
var Flags = []string{"--no-liftoff"}

// ErrNoNode is returned by Run when no Node binary is found on PATH.
var ErrNoNode = errors.New("v8: node not found on PATH (Debian: apt-get install nodejs)")

// Request is one HTTP request sent through a worker VM.
type Request struct {
	Worker  int         `json:"worker,omitempty"`
	Method  string      `json:"method,omitempty"`
	Path    string      `json:"path,omitempty"`
	Source  string      `json:"source,omitempty"` // source.address, "ip:port"
	Route   string      `json:"route,omitempty"`  // xds.route_name
	Headers [][2]string `json:"headers,omitempty"`
}

// Bench asks for guest time per request: Warmup requests, then Rounds rounds of N requests,
// each round's guest time per request recorded. With NewClients, every request (warm-up
// included) comes from another source address, 10.a.b.c, so that no key is seen twice while
// Warmup + Rounds*N <= 2^24.
//
// SameClient and Clients, when not empty, are the configurations of baselines run in the same
// process: other VMs of the same module, each with a vm_id and shared data of its own.
// SameClient's VM is sent Request by one client on every request; Clients' by Population
// returning clients from addresses 10.a.b.c, each sending one request of the warm-up (placing
// its keys), then every request from one of them in a fixed shuffled order, each coming back
// once in every Population requests. After the warm-up of each, the VMs take turns by blocks
// of 100 requests, so that all meet the same load on the machine; Result.SameClientP50NS and
// Result.ReturningClientsP50NS are the baselines' median requests.
type Bench struct {
	Request    Request `json:"request"`
	Warmup     int     `json:"warmup"`
	Rounds     int     `json:"rounds"`
	N          int     `json:"n"`
	NewClients bool    `json:"new_clients,omitempty"`
	SameClient string  `json:"same_client,omitempty"`
	Clients    string  `json:"clients,omitempty"`
	Population int     `json:"population,omitempty"`
}

// Job is what one Node process does: load Module, then either only instantiate and run
// _initialize (Mode "init", the floor of a Go module's start-up), or start Workers VMs with
// Config as the plugin configuration and send Requests (and the Bench loop) through them.
type Job struct {
	Module   string    `json:"module"`
	Mode     string    `json:"mode,omitempty"`
	VMID     string    `json:"vm_id,omitempty"`
	Config   string    `json:"config,omitempty"`
	Workers  int       `json:"workers,omitempty"`
	Requests []Request `json:"requests,omitempty"`
	Bench    *Bench    `json:"bench,omitempty"`
	// PhaseMarkers makes the host write "@@PHASE name" before each start-up step (init,
	// vmstart, configure) and each request (request0, ...), to split a V8 trace by step.
	PhaseMarkers bool `json:"phase_markers,omitempty"`
}

// Response is what the client received for one request.
type Response struct {
	Status  int         `json:"status"`
	Headers [][2]string `json:"headers"`
	Body    string      `json:"body"`
}

// Header returns the first value of the header name (lower case), or "".
func (r Response) Header(name string) string {
	for _, h := range r.Headers {
		if h[0] == name {
			return h[1]
		}
	}
	return ""
}

// Result is what the Node process reports.
type Result struct {
	CompileMS      float64 `json:"compile_ms"`
	FirstVMMS      float64 `json:"first_vm_ms"`
	FirstRequestMS float64 `json:"first_request_ms"`
	// FirstVMCPUMS and FirstRequestCPUMS are the Node process's CPU time (user and system)
	// during the same steps as FirstVMMS and FirstRequestMS: on a shared machine they move far
	// less than wall time.
	FirstVMCPUMS      float64    `json:"first_vm_cpu_ms"`
	FirstRequestCPUMS float64    `json:"first_request_cpu_ms"`
	Configured        bool       `json:"configured"`
	Results           []Response `json:"results"`
	GuestNS           float64    `json:"guest_ns_per_request"`
	GuestSamples      []float64  `json:"guest_ns_samples"`
	// GuestP50NS is the median of every timed request's own guest time (all rounds), the
	// statistic wasmhost/moduletest reports on wazero as guest-p50-ns/op; GuestNS is the
	// median of the rounds' means.
	GuestP50NS float64 `json:"guest_p50_ns"`
	// SameClientP50NS and ReturningClientsP50NS are the median requests of Bench.SameClient's
	// and Bench.Clients' VMs, measured beside GuestP50NS.
	SameClientP50NS       float64          `json:"same_client_p50_ns"`
	ReturningClientsP50NS float64          `json:"returning_clients_p50_ns"`
	SharedKeys            int              `json:"shared_keys"`
	Metrics               map[string]int64 `json:"metrics"`
	Logs                  [][2]any         `json:"logs"`

	// PhasesMS splits FirstVMMS into its steps: "instantiate", "initialize" (_initialize),
	// and for a filter "vm_start" (root context and proxy_on_vm_start) and "configure"
	// (proxy_on_configure).
	PhasesMS map[string]float64 `json:"phases_ms"`
	// MemoryBytes is the first worker VM's linear memory size after its start ("configure")
	// and after the first request ("request"), to tell where the Go heap grew.
	MemoryBytes map[string]int `json:"memory_bytes"`
}

// Run runs job in a fresh Node process (so every run starts with a cold V8, as a new Envoy
// does) and returns its result.
func Run(job Job) (Result, error) {
	res, _, err := runNode(job)
	return res, err
}

// Compiled is one module function V8 compiled.
type Compiled struct {
	// Index is the function's index in the module's function index space, as in its name
	// section (wasmtest.FunctionNames).
	Index uint32
	// BodyBytes is the size of the function's body in the module, which TurboFan compiles in
	// time roughly proportional to it (docs/BENCHMARKS.md: about 1.1 ms per KB on Node 20).
	BodyBytes int
	// Phase is the start-up step during which it was compiled ("init", "vmstart",
	// "configure", "request0", ...) when the job set PhaseMarkers, and "" otherwise.
	Phase string
}

// CompiledFunctions runs job like Run with V8's --trace-wasm-compilation-times and returns,
// besides the result, every module function V8 compiled (each once, on its first call:
// Envoy's flags turn off the baseline compiler), in the order compiled.
func CompiledFunctions(job Job) (Result, []Compiled, error) {
	res, trace, err := runNode(job, "--trace-wasm-compilation-times")
	if err != nil {
		return res, nil, err
	}
	var compiled []Compiled
	phase := ""
	for _, line := range strings.Split(string(trace), "\n") {
		if name, ok := strings.CutPrefix(line, "@@PHASE "); ok {
			phase = name
			continue
		}
		// "Compiled function 0x...#123 using TurboFan, took 1 ms and ... bodysize 456 ..."
		_, rest, ok := strings.Cut(line, "Compiled function ")
		if !ok {
			continue
		}
		_, rest, ok = strings.Cut(rest, "#")
		num, rest, ok2 := strings.Cut(rest, " ")
		i, err := strconv.ParseUint(num, 10, 32)
		if !ok || !ok2 || err != nil {
			continue
		}
		c := Compiled{Index: uint32(i), Phase: phase}
		if _, size, ok := strings.Cut(rest, "bodysize "); ok {
			size, _, _ = strings.Cut(size, " ")
			c.BodyBytes, _ = strconv.Atoi(strings.TrimRight(size, ","))
		}
		compiled = append(compiled, c)
	}
	return res, compiled, nil
}

// runNode runs job in a fresh Node process with Flags and extra, and returns the result and what
// the process wrote to its standard output before it (V8's traces).
func runNode(job Job, extra ...string) (Result, []byte, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		if node, err = exec.LookPath("nodejs"); err != nil {
			return Result{}, nil, ErrNoNode
		}
	}
	dir, err := os.MkdirTemp("", "v8host")
	if err != nil {
		return Result{}, nil, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "host.js")
	if err := os.WriteFile(script, hostJS, 0o644); err != nil {
		return Result{}, nil, err
	}
	in, err := json.Marshal(job)
	if err != nil {
		return Result{}, nil, err
	}
	cmd := exec.Command(node, append(append(append([]string{}, Flags...), extra...), script)...)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return Result{}, nil, fmt.Errorf("v8: node: %v: %s", err, stderr.Bytes())
	}
	// The host writes its result last, as one line of JSON; a trace flag writes lines before.
	out := stdout.Bytes()
	trace, result := []byte(nil), out
	if i := bytes.LastIndexByte(bytes.TrimRight(out, "\n"), '\n'); i >= 0 {
		trace, result = out[:i+1], out[i+1:]
	}
	var res Result
	if err := json.Unmarshal(result, &res); err != nil {
		return Result{}, nil, fmt.Errorf("v8: decoding the host's result: %v (%.200s)", err, result)
	}
	return res, trace, nil
}
