package e2e

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/echo"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// TestWazero runs the scenarios against the project's wazero host serving envoy.yaml (two
// independent proxies, as two Envoys) and e2e/envoy-failure-modes.yaml, with the real module,
// the echo upstream and a private redis-server + webdis. It never skips: without
// redis-server or webdis (outside CI) only the scenarios that need Redis skip, each with a
// line saying so; with CI=true a missing Redis fails.
func TestWazero(t *testing.T) {
	e := &wazeroTarget{t: t, wasm: wasmtest.BuildModule(t)}
	var err error
	if e.main, err = envoyconf.Load(filepath.Join("..", "envoy.yaml")); err != nil {
		t.Fatal(err)
	}
	if e.failure, err = envoyconf.Load("envoy-failure-modes.yaml"); err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(echo.Handler())
	t.Cleanup(up.Close)

	webdis := deadAddress(t)
	if haveRedis() || os.Getenv("CI") == "true" {
		e.rs = redistest.Start(t)
		webdis = e.rs.WebdisAddr()
	} else {
		t.Log("redis-server or webdis not installed: the scenarios that need Redis will skip")
	}
	for _, c := range []*envoyconf.Config{e.main, e.failure} {
		if err := c.Override("upstream", up.URL); err != nil {
			t.Fatal(err)
		}
		if err := c.Override("webdis", webdis); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(e.stop)
	runScenarios(t, e)
}

func haveRedis() bool {
	_, err1 := exec.LookPath("redis-server")
	_, err2 := exec.LookPath("webdis")
	return err1 == nil && err2 == nil
}

// deadAddress returns a loopback address nothing listens on: a Redis cluster that cannot be
// reached, as in Envoy when webdis has no healthy host.
func deadAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

type wazeroTarget struct {
	t             *testing.T
	wasm          []byte
	main, failure *envoyconf.Config
	rs            *redistest.Server
	// proxies are envoy.yaml twice, each with its own shared data; failures is
	// envoy-failure-modes.yaml.
	proxies  [2]*envoyhost.Server
	failures *envoyhost.Server
}

func (e *wazeroTarget) start(t *testing.T, c *envoyconf.Config) *envoyhost.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := envoyhost.Start(ctx, c, envoyhost.Options{
		Wasm:           e.wasm,
		Workers:        2,
		Bind:           "127.0.0.1",
		EphemeralPorts: true,
		Stdout:         io.Discard, // envoy.yaml's access log; the scenarios read responses
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *wazeroTarget) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range append(e.proxies[:], e.failures) {
		if s != nil {
			if err := s.Close(ctx); err != nil {
				e.t.Errorf("closing a server: %v", err)
			}
		}
	}
	e.proxies, e.failures = [2]*envoyhost.Server{}, nil
}

// reset starts fresh servers (new shared data, new metrics) and empties Redis.
func (e *wazeroTarget) reset(t *testing.T) {
	e.stop()
	e.proxies[0] = e.start(t, e.main)
	e.proxies[1] = e.start(t, e.main)
	e.failures = e.start(t, e.failure)
	if e.rs != nil {
		e.rs.MustDo("FLUSHALL")
	}
}

func (e *wazeroTarget) proxy(i int) string { return e.proxies[i].URL("ingress") }
func (e *wazeroTarget) admin(i int) string { return e.proxies[i].AdminURL() }
func (e *wazeroTarget) failureMode(mode string) string {
	return e.failures.URL("redis-down-" + mode)
}
func (e *wazeroTarget) failureAdmin() string    { return e.failures.AdminURL() }
func (e *wazeroTarget) redis() bool             { return e.rs != nil }
func (e *wazeroTarget) stopRedis(t *testing.T)  { e.rs.StopRedis() }
func (e *wazeroTarget) startRedis(t *testing.T) { e.rs.StartRedis() }
