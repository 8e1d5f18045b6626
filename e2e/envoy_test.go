package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// envoyImage and redisImage are the images docker-compose.yml pins, which TestEnvoy pulls
// ahead of compose up so that a missing image is a skip, not a failure;
// TestComposeMatchesConfigs keeps them in step with the file.
const (
	envoyImage = "envoyproxy/envoy:v1.39.0"
	redisImage = "redis:7.4-alpine"
)

// composeProject keeps the suite's containers apart from a `make run` (project
// ratelimit-wasm); the published ports are the same, so the two cannot run at once.
const composeProject = "ratelimit-wasm-e2e"

// TestEnvoy runs the scenarios against real Envoy in docker compose (docker-compose.yml):
// two Envoys with envoy.yaml sharing one Redis, and one with envoy-failure-modes.yaml. It is
// opt-in, because it needs a Docker engine and takes minutes the first time (images):
//
//	E2E_ENVOY=1 go test -run TestEnvoy ./e2e/
//
// Without E2E_ENVOY=1, or when no Docker engine answers or the images cannot be had, it
// skips with one line saying which.
func TestEnvoy(t *testing.T) {
	if os.Getenv("E2E_ENVOY") != "1" {
		t.Skip("Envoy e2e is opt-in: E2E_ENVOY=1 runs these scenarios against Envoy in docker compose")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("E2E_ENVOY=1 but the docker client is not installed")
	}
	if out, err := run(30*time.Second, "docker", "info"); err != nil {
		t.Skipf("E2E_ENVOY=1 but no Docker engine answers (docker info: %s)", lastLine(out, err))
	}
	e := &envoyTarget{}
	if _, err := run(30*time.Second, "docker", "compose", "version"); err == nil {
		e.compose = []string{"docker", "compose"}
	} else if _, err := exec.LookPath("docker-compose"); err == nil {
		e.compose = []string{"docker-compose"}
	} else {
		t.Skip("E2E_ENVOY=1 but neither docker compose nor docker-compose is installed")
	}
	wasm, err := wasmtest.BuildFile(".")
	if err != nil {
		t.Fatal(err)
	}
	e.env = append(os.Environ(), "RATELIMIT_WASM="+wasm)
	for _, img := range []string{envoyImage, redisImage} {
		if _, err := run(30*time.Second, "docker", "image", "inspect", img); err == nil {
			continue
		}
		if out, err := run(10*time.Minute, "docker", "pull", img); err != nil {
			t.Skipf("E2E_ENVOY=1 but image %s is not available (docker pull: %s)", img, lastLine(out, err))
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := e.do(time.Minute, "logs", "--no-color", "--tail", "40")
			t.Logf("compose logs:\n%s", out)
		}
		if out, err := e.do(2*time.Minute, "down", "--remove-orphans", "--timeout", "5"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})
	if out, err := e.do(15*time.Minute, "up", "--build", "--detach"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	e.waitReady(t)
	runScenarios(t, e)
}

type envoyTarget struct {
	compose []string
	env     []string
}

// do runs one compose command for the suite's project.
func (e *envoyTarget) do(timeout time.Duration, args ...string) ([]byte, error) {
	full := append(append([]string(nil), e.compose[1:]...), "-p", composeProject, "-f", "docker-compose.yml")
	full = append(full, args...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.compose[0], full...)
	cmd.Env = e.env
	return cmd.CombinedOutput()
}

func (e *envoyTarget) must(t *testing.T, timeout time.Duration, args ...string) {
	t.Helper()
	if out, err := e.do(timeout, args...); err != nil {
		t.Fatalf("compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// waitReady waits until every Envoy's admin answers /ready (LIVE).
func (e *envoyTarget) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for _, admin := range []string{e.admin(0), e.admin(1), e.failureAdmin()} {
		for {
			res, err := client.Get(admin + "/ready")
			if err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					break
				}
				err = fmt.Errorf("status %d", res.StatusCode)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/ready did not answer 200 within 90 s (last answer: %v)", admin, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// reset restarts the Envoys (shared data lives in the process, so a restart empties it) and
// empties Redis.
func (e *envoyTarget) reset(t *testing.T) {
	e.must(t, 2*time.Minute, "restart", "--timeout", "5", "envoy", "envoy2", "envoy-failure-modes")
	e.must(t, time.Minute, "exec", "-T", "redis", "redis-cli", "FLUSHALL")
	e.waitReady(t)
}

func (e *envoyTarget) proxy(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", 10000+i) }
func (e *envoyTarget) admin(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", 9901+i) }
func (e *envoyTarget) failureMode(mode string) string {
	return map[string]string{
		"allow": "http://127.0.0.1:10010",
		"deny":  "http://127.0.0.1:10011",
		"local": "http://127.0.0.1:10012",
	}[mode]
}
func (e *envoyTarget) failureAdmin() string { return "http://127.0.0.1:9903" }
func (e *envoyTarget) redis() bool          { return true }
func (e *envoyTarget) stopRedis(t *testing.T) {
	e.must(t, time.Minute, "stop", "--timeout", "2", "redis")
}
func (e *envoyTarget) startRedis(t *testing.T) { e.must(t, time.Minute, "start", "redis") }

// run runs a command with a timeout and returns its combined output.
func run(timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// lastLine is the line of a failed command's output that usually says why (docker prints
// its error after everything else).
func lastLine(out []byte, err error) string {
	out = bytes.TrimSpace(out)
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		out = bytes.TrimSpace(out[i+1:])
	}
	if len(out) > 0 {
		return string(out)
	}
	return err.Error()
}
