package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// target is one way to run the product. Every scenario starts from a reset target: no
// rate-limit state anywhere, Redis running and empty.
type target interface {
	// proxy returns the base URL of envoy.yaml's listener on proxy i: 0 is the first proxy,
	// 1 a second, independent one (its own shared data) that shares Redis with the first.
	proxy(i int) string
	// admin returns the base URL of proxy i's admin interface.
	admin(i int) string
	// failureMode returns the base URL of the e2e/envoy-failure-modes.yaml listener for a
	// redis.failure_mode ("allow", "deny", "local"); failureAdmin is that proxy's admin.
	failureMode(mode string) string
	failureAdmin() string
	// redis reports whether Redis and webdis run for this target; scenarios that need them
	// skip otherwise (only possible for the wazero target outside CI, when redis-server or
	// webdis is not installed).
	redis() bool
	// stopRedis stops Redis (webdis stays up and answers 503); startRedis brings it back.
	stopRedis(t *testing.T)
	startRedis(t *testing.T)
	// reset gives the next scenario fresh state.
	reset(t *testing.T)
}

// response is what a scenario looks at.
type response struct {
	status int
	header http.Header
	body   []byte
}

// client talks to the proxies. Keep-alive is off so that every request is a connection of its
// own, as from independent clients; the timeout bounds a scenario that would otherwise hang on
// a stuck proxy.
var client = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// do sends one request. headers are pairs: name, value, name, value...
func do(t *testing.T, method, url string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return response{status: res.StatusCode, header: res.Header, body: body}
}

// statuses sends n identical requests and returns their status codes in order.
func statuses(t *testing.T, n int, method, url string, headers ...string) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i] = do(t, method, url, headers...).status
	}
	return out
}

// repeat returns n copies of v, for comparing status sequences.
func repeat(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// fromUpstream reports whether a response came from the echo upstream rather than from the
// proxy.
func (r response) fromUpstream() bool {
	var rep struct {
		Upstream string `json:"upstream"`
	}
	return json.Unmarshal(r.body, &rep) == nil && rep.Upstream == "echo"
}

// denial is the filter's default 429 body.
type denial struct {
	Error      string `json:"error"`
	Rule       string `json:"rule"`
	RetryAfter int    `json:"retry_after"`
}

// denial decodes the default deny body, failing the test when the response is not one.
func (r response) denial(t *testing.T) denial {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429; body %s", r.status, r.body)
	}
	var d denial
	dec := json.NewDecoder(strings.NewReader(string(r.body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("429 body %q is not the documented JSON: %v", r.body, err)
	}
	return d
}

// metrics reads an admin's /stats/prometheus into sample name (with its labels, as printed) ->
// value, and metric name -> TYPE.
func metrics(t *testing.T, admin string) (samples map[string]float64, types map[string]string) {
	t.Helper()
	r := do(t, "GET", admin+"/stats/prometheus")
	if r.status != http.StatusOK {
		t.Fatalf("%s/stats/prometheus: status %d", admin, r.status)
	}
	samples, types = map[string]float64{}, map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("malformed Prometheus line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("malformed Prometheus value in %q", line)
		}
		// Envoy (and the wazero host after it) prints an empty label set for custom stats
		// ("name{} 1"); the key drops it, so that scenarios name a sample as "name" and a
		// sample with labels as it is printed.
		samples[strings.TrimSuffix(line[:i], "{}")] = v
	}
	return samples, types
}

// counter returns one counter's value from an admin, 0 when it is absent.
func counter(t *testing.T, admin, name string) float64 {
	t.Helper()
	s, _ := metrics(t, admin)
	return s[name]
}
