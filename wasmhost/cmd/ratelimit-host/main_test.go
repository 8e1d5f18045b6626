package main

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
)

// Trying your own plugin configuration: the host run with -config serves an admin
// interface like the envoy.yaml mode, and /stats/prometheus carries the rule and decision as
// labels while the host runs, not only at shutdown.
func TestPluginConfigModeServesAdmin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	dir := t.TempDir()
	wasm := filepath.Join(dir, "ratelimit.wasm")
	if err := os.WriteFile(wasm, wasmtest.BuildModule(t), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "plugin.json")
	if err := os.WriteFile(cfg, []byte(`{"rules":[{"name":"mine","algorithm":"fixed_window","limit":1,"window":"1m"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := wasmtest.BuildCommand(t, "./wasmhost/cmd/ratelimit-host")
	cmd := exec.Command(bin, "-wasm", wasm, "-config", cfg, "-echo", "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var proxy, admin string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && (proxy == "" || admin == "") {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "curl -i "):
			proxy = strings.TrimSuffix(strings.TrimPrefix(line, "curl -i "), "/")
		case strings.HasSuffix(line, "/ready"):
			admin = strings.TrimSuffix(strings.Fields(line)[0], "/stats/prometheus")
		}
	}
	if proxy == "" || admin == "" {
		t.Fatalf("no proxy (%q) or admin (%q) address in the banner", proxy, admin)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	get := func(url string) (int, string) {
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(proxy + "/"); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	if code, _ := get(proxy + "/"); code != 429 {
		t.Fatalf("second request: %d", code)
	}
	_, body := get(admin + "/stats/prometheus")
	for _, want := range []string{
		`ratelimit_requests_total{rule="mine",decision="allowed"} 1`,
		`ratelimit_requests_total{rule="mine",decision="denied"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/stats/prometheus lacks %q:\n%s", want, body)
		}
	}
	if code, body := get(admin + "/ready"); code != 200 || body != "LIVE\n" {
		t.Errorf("/ready: %d %q", code, body)
	}
}

// In -config mode a global rule whose redis.cluster has no -cluster address would answer with
// its failure mode on every request: the host refuses to start, and says which flag to give.
func TestPluginConfigModeRefusesGlobalRulesWithoutCluster(t *testing.T) {
	global := []byte(`{"redis":{"cluster":"webdis"},"rules":[
		{"name":"g","scope":"global","algorithm":"token_bucket","limit":5,"window":"1s","continue":true},
		{"name":"l","algorithm":"token_bucket","limit":5,"window":"1s"}]}`)
	err := checkRedisCluster(global, map[string]string{"other": "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), `redis.cluster "webdis" has no address`) ||
		!strings.Contains(err.Error(), `global rules ("g")`) || !strings.Contains(err.Error(), "-cluster webdis=") {
		t.Fatalf("a global rule without its cluster: %v", err)
	}
	if err := checkRedisCluster(global, map[string]string{"webdis": "http://127.0.0.1:7379"}); err != nil {
		t.Fatalf("with -cluster webdis=...: %v", err)
	}
	local := []byte(`{"redis":{"cluster":"webdis"},"rules":[{"name":"l","algorithm":"token_bucket","limit":5,"window":"1s"}]}`)
	if err := checkRedisCluster(local, nil); err != nil {
		t.Fatalf("no global rule: %v", err)
	}
	if err := checkRedisCluster([]byte(`{"rules":[{"name":"x","limt":1}]}`), nil); err != nil {
		t.Fatalf("a configuration the filter refuses is the filter's to report: %v", err)
	}
}

// Without -envoy, a -cluster value is the URL callouts go to; a bare host:port would fail every
// callout, so it is refused with the form to give instead.
func TestPluginConfigModeClusterNeedsAScheme(t *testing.T) {
	urls, err := clusterURLs([]string{"webdis=http://127.0.0.1:7379"})
	if err != nil || urls["webdis"] != "http://127.0.0.1:7379" {
		t.Fatalf("name=url: %v %v", urls, err)
	}
	_, err = clusterURLs([]string{"webdis=127.0.0.1:7379"})
	if err == nil || !strings.Contains(err.Error(), "webdis=http://127.0.0.1:7379") {
		t.Fatalf("name=host:port: %v", err)
	}
	if _, err := clusterURLs([]string{"webdis"}); err == nil {
		t.Fatal("a value without '=' was accepted")
	}
}

// A refused configuration's VM log is printed once: the host writes it to stderr as it comes,
// so the start-up error drops its copy, unless the log level hid the warnings.
func TestStartErrorWithoutVMLog(t *testing.T) {
	err := errors.New("wasmhost: canary: proxy_on_configure returned false\nVM log:\n\t[critical] bad rule")
	if got := withoutVMLog(err, wasmhost.LogInfo).Error(); got != "wasmhost: canary: proxy_on_configure returned false" {
		t.Errorf("at info: %q", got)
	}
	if got := withoutVMLog(err, wasmhost.LogError); got != err {
		t.Errorf("at error the warnings were not printed, so the log stays: %q", got)
	}
	plain := errors.New("listen tcp: address already in use")
	if got := withoutVMLog(plain, wasmhost.LogInfo); got != plain {
		t.Errorf("an error without a VM log changed: %q", got)
	}
}
