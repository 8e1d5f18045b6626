// Package echo is the upstream service of the e2e suite and of `make run`: it answers every
// request with a JSON description of what it received, so that a person (or a test) can see
// what the proxy forwarded — which headers the filter added or removed, the path after
// normalisation — and tell a response of the upstream from one the proxy made itself.
package echo

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/fakellm"
)

// Reply is the JSON body the echo server answers with.
type Reply struct {
	// Upstream is always "echo": a response carrying it came from the upstream, not from the
	// proxy.
	Upstream string `json:"upstream"`
	// Method, Path (with query) and Host are the request line and authority as received.
	Method string `json:"method"`
	Path   string `json:"path"`
	Host   string `json:"host"`
	// Headers are the request headers, names lower-cased, multiple values joined by ",".
	Headers map[string]string `json:"headers"`
	// BodyBytes is the length of the request body.
	BodyBytes int `json:"body_bytes"`
}

// maxBody bounds what the echo server reads of a request body: it reports only the length.
const maxBody = 1 << 20

// Handler returns the echo handler. A query parameter status=NNN (200-599) sets the
// response status, so that an upstream error can be demonstrated without another service.
// The LLM API paths (/v1/chat/completions, /v1/messages) are answered by a fake LLM instead
// (package fakellm), so that envoy.yaml's token limits can be tried.
func Handler() http.Handler {
	llm := fakellm.Handler{Delay: 50 * time.Millisecond}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/messages" {
			llm.ServeHTTP(w, r)
			return
		}
		n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, maxBody))
		rep := Reply{
			Upstream:  "echo",
			Method:    r.Method,
			Path:      r.RequestURI,
			Host:      r.Host,
			Headers:   map[string]string{},
			BodyBytes: int(n),
		}
		// net/http canonicalises header names, so lower-casing them cannot merge two; the
		// JSON encoder sorts the map's keys.
		for k, vs := range r.Header {
			rep.Headers[strings.ToLower(k)] = strings.Join(vs, ",")
		}
		status := http.StatusOK
		if s, err := strconv.Atoi(r.URL.Query().Get("status")); err == nil && s >= 200 && s <= 599 {
			status = s
		}
		body, _ := json.MarshalIndent(rep, "", "  ")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
		w.WriteHeader(status)
		_, _ = w.Write(append(body, '\n'))
	})
}
