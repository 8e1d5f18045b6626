package e2e

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// TestRunScriptStopsEverythingOnSIGTERM holds the README's word on `make run` without
// Docker: scripts/run.sh serves envoy.yaml through the wazero host (with redis-server and
// webdis when installed), and a SIGTERM, which make passes on to its recipe, stops every
// process it started and frees envoy.yaml's ports. It needs those ports (127.0.0.1:10000 and
// :9901) free: outside CI, a running `make run` skips it.
func TestRunScriptStopsEverythingOnSIGTERM(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:10000", "127.0.0.1:9901"} {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is in use: envoy.yaml's ports must be free", addr)
			}
			t.Skipf("%s is in use (a make run?): envoy.yaml's ports must be free", addr)
		}
	}
	wasm, err := wasmtest.BuildFile(".")
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "run.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command("bash", "scripts/run.sh")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "RATELIMIT_RUN=wazero", "RATELIMIT_WASM="+wasm)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group, so that a failing test can stop whatever the script started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	defer func() {
		// Whatever of the group still runs (nothing, when the script cleaned up) is stopped.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if !stopped {
			<-done
		}
	}()
	runLog := func() string { b, _ := os.ReadFile(log.Name()); return string(b) }

	// The first build of the host compiles the emulator module: minutes on a cold cache.
	deadline := time.Now().Add(5 * time.Minute)
	for !answers("http://127.0.0.1:9901/ready") {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("run.sh exited before serving (%v):\n%s", err, runLog())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("run.sh did not serve within 5 minutes:\n%s", runLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !answers("http://127.0.0.1:10000/api/items") {
		t.Fatalf("the proxy does not serve /api/items:\n%s", runLog())
	}
	started := descendants(cmd.Process.Pid)
	if len(started) == 0 {
		t.Fatal("run.sh started no process")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		stopped = true
	case <-time.After(20 * time.Second):
		t.Fatalf("run.sh still runs 20 s after SIGTERM:\n%s", runLog())
	}
	for _, pid := range started {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d (started by run.sh) still runs after SIGTERM", pid)
		}
	}
	for _, addr := range []string{"127.0.0.1:10000", "127.0.0.1:9901"} {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after SIGTERM", addr)
		}
	}
	if !strings.Contains(runLog(), "run.sh: stopped.") {
		t.Errorf("run.sh did not clean up:\n%s", runLog())
	}
}

// answers reports whether url answers 200.
func answers(url string) bool {
	c := http.Client{Timeout: time.Second}
	res, err := c.Get(url)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// descendants returns the processes whose chain of parents leads to pid (Linux /proc).
func descendants(pid int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its last ')'.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
				parent[p], _ = strconv.Atoi(f[1])
			}
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}
