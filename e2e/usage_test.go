package e2e

import (
	"strings"
	"testing"
)

// llmTokens: envoy.yaml's llm route limits tokens per API key (2,000 a minute, 20,000 a day),
// reserving x-max-tokens at the request and charging the usage the response reports. The echo
// upstream answers the route as a fake LLM (wasmhost/fakellm): OpenAI's shape on
// /v1/chat/completions, Anthropic's on /v1/messages, a text/event-stream with ?stream=1.
func llmTokens(t *testing.T, e target) {
	p := e.proxy(0) + "/v1/chat/completions"
	key := uniqueKey("llm")
	// 1,500 tokens used of a 1,000 reservation: the key owes 500 beyond it, 500 are left.
	r := do(t, "POST", p+"?stream=1", "x-api-key", key, "x-max-tokens", "1000",
		"x-fake-input-tokens", "500", "x-fake-output-tokens", "1000")
	if r.status != 200 {
		t.Fatalf("first request: %d %s", r.status, r.body)
	}
	if ct := r.header.Get("content-type"); ct != "text/event-stream" {
		t.Fatalf("content-type %q, want the upstream's text/event-stream", ct)
	}
	if !strings.Contains(string(r.body), `"total_tokens":1500`) || !strings.HasSuffix(string(r.body), "data: [DONE]\n\n") {
		t.Fatalf("the client did not get the upstream's stream unchanged:\n%s", r.body)
	}
	// A reservation of 1,000 no longer fits; one of 400 does.
	if r := do(t, "POST", p, "x-api-key", key, "x-max-tokens", "1000"); r.status != 429 {
		t.Fatalf("a reservation of 1000 with 500 left: %d %s", r.status, r.body)
	}
	r = do(t, "POST", p, "x-api-key", key, "x-max-tokens", "400", "x-fake-input-tokens", "10", "x-fake-output-tokens", "20")
	if r.status != 200 {
		t.Fatalf("a reservation of 400 with 500 left: %d %s", r.status, r.body)
	}
	// It used 30 of its 400. The day's window (which does not refill) has counted 1,500 + 30,
	// and this request's reservation of 400, which its RateLimit header shows.
	r = do(t, "POST", p, "x-api-key", key, "x-max-tokens", "400", "x-fake-input-tokens", "0", "x-fake-output-tokens", "0")
	if rl := r.header.Get("ratelimit"); r.status != 200 || !strings.Contains(rl, `"llm-tokens-per-day";r=18070;`) &&
		!strings.Contains(rl, `"llm-tokens-per-day";r=19600;t=86`) { // a new day began mid-test
		t.Fatalf("after a refund of 370: %d, ratelimit %q", r.status, rl)
	}
	// Another key, and the same key on the other proxy (local limits), are untouched.
	if r := do(t, "POST", p, "x-api-key", uniqueKey("llm"), "x-max-tokens", "1000"); r.status != 200 {
		t.Fatalf("another key: %d", r.status)
	}
	if r := do(t, "POST", e.proxy(1)+"/v1/chat/completions", "x-api-key", key, "x-max-tokens", "1000"); r.status != 200 {
		t.Fatalf("the same key on the other proxy: %d", r.status)
	}
}
