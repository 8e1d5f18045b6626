// Package fakellm is a fake LLM API upstream for tests and `make run`: it answers chat
// requests in OpenAI's and Anthropic's shapes, as one JSON document or as a text/event-stream,
// with the token usage a test asks for, so that a usage-cost rule can be checked against
// known numbers.
//
// Responses are built as chunks (Chunks), the way the upstream would write them: one JSON
// document, or one SSE event per chunk; Handler serves them over HTTP, flushing each chunk.
package fakellm

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Shape is an API's response format.
type Shape string

// The shapes the fake answers in.
const (
	OpenAI    Shape = "openai"
	Anthropic Shape = "anthropic"
)

// Reply describes one answer.
type Reply struct {
	Shape  Shape
	Stream bool // a text/event-stream of events, else one JSON document
	// Input and Output are the tokens reported: OpenAI's prompt and completion tokens
	// (total = Input + Output), Anthropic's input and output tokens.
	Input, Output int
	// Words is how many content deltas a stream carries (default 8); each is about
	// ChunkBytes long.
	Words      int
	ChunkBytes int
}

// ContentType is the reply's content-type.
func (r Reply) ContentType() string {
	if r.Stream {
		return "text/event-stream"
	}
	return "application/json"
}

// Total is the usage a rule summing the shape's pointers charges.
func (r Reply) Total() int { return r.Input + r.Output }

// Pointers are the JSON pointers of the reply's usage, summed to Total.
func (r Reply) Pointers() []string {
	switch {
	case r.Shape == Anthropic && r.Stream:
		return []string{"/message/usage/input_tokens", "/usage/output_tokens"}
	case r.Shape == Anthropic:
		return []string{"/usage/input_tokens", "/usage/output_tokens"}
	}
	return []string{"/usage/total_tokens"}
}

// Chunks returns the reply's body as the upstream writes it.
func (r Reply) Chunks() [][]byte {
	words := r.Words
	if words <= 0 {
		words = 8
	}
	text := strings.Repeat("token ", max(r.ChunkBytes/6, 1))
	in, out := strconv.Itoa(r.Input), strconv.Itoa(r.Output)
	if !r.Stream {
		var body string
		if r.Shape == Anthropic {
			body = `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"` + text + `"}],` +
				`"stop_reason":"end_turn","usage":{"input_tokens":` + in + `,"output_tokens":` + out + `}}`
		} else {
			body = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` + text + `"},"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":` + in + `,"completion_tokens":` + out + `,"total_tokens":` + strconv.Itoa(r.Total()) +
				`,"prompt_tokens_details":{"cached_tokens":0}}}`
		}
		return [][]byte{[]byte(body)}
	}
	var chunks [][]byte
	add := func(s string) { chunks = append(chunks, []byte(s)) }
	if r.Shape == Anthropic {
		add("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"role\":\"assistant\",\"usage\":{\"input_tokens\":" + in + ",\"output_tokens\":1}}}\n\n")
		for range words {
			add("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n")
		}
		add("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":" + out + "}}\n\n")
		add("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		return chunks
	}
	for range words {
		add("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + text + "\"}}],\"usage\":null}\n\n")
	}
	add("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":" + in +
		",\"completion_tokens\":" + out + ",\"total_tokens\":" + strconv.Itoa(r.Total()) + "}}\n\n")
	add("data: [DONE]\n\n")
	return chunks
}

// FromRequest reads a reply's description from a request: the shape from the path
// (/v1/messages is Anthropic's, anything else OpenAI's), Stream from "stream": true in the
// body or ?stream=1, and the usage from the x-fake-input-tokens and x-fake-output-tokens
// headers (default 12 and 30).
func FromRequest(r *http.Request, body []byte) Reply {
	rep := Reply{Shape: OpenAI, Input: 12, Output: 30}
	if strings.HasSuffix(r.URL.Path, "/messages") {
		rep.Shape = Anthropic
	}
	b := string(body)
	rep.Stream = r.URL.Query().Get("stream") == "1" || strings.Contains(b, `"stream":true`) || strings.Contains(b, `"stream": true`)
	if n, err := strconv.Atoi(r.Header.Get("x-fake-input-tokens")); err == nil && n >= 0 {
		rep.Input = n
	}
	if n, err := strconv.Atoi(r.Header.Get("x-fake-output-tokens")); err == nil && n >= 0 {
		rep.Output = n
	}
	return rep
}

// Handler serves replies (FromRequest), writing and flushing each chunk, Delay apart.
type Handler struct {
	Delay time.Duration
}

func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := make([]byte, 0, 1024)
	buf := make([]byte, 1024)
	for len(body) < 1<<20 {
		n, err := r.Body.Read(buf)
		body = append(body, buf[:n]...)
		if err != nil {
			break
		}
	}
	rep := FromRequest(r, body)
	w.Header().Set("content-type", rep.ContentType())
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	for i, c := range rep.Chunks() {
		if i > 0 && h.Delay > 0 {
			time.Sleep(h.Delay)
		}
		if _, err := w.Write(c); err != nil {
			return
		}
		if f != nil {
			f.Flush()
		}
	}
}
