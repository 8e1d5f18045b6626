package filter

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// pointers returns the usage spec of a rule whose usage is the JSON pointers ps.
func pointers(ps ...string) *config.UsageSpec {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = strconv.Quote(p)
	}
	c, err := config.Parse([]byte(`{"rules":[{"name":"r","algorithm":"token_bucket","limit":10,"window":"1s",` +
		`"cost":{"reserve":1,"max":10,"usage":{"json":[` + strings.Join(q, ",") + `]}}}]}`))
	if err != nil {
		panic(err)
	}
	return c.Rules[0].CostSpec.Usage
}

// scanIn feeds body to a scanner of spec in chunks of size n (the whole body at once when n
// is 0).
func scanIn(spec *config.UsageSpec, sse bool, body string, n int) (int64, bool) {
	var s usageScanner
	s.reset(spec.Pointers, sse)
	if n == 0 {
		n = len(body) + 1
	}
	for len(body) > 0 {
		k := min(n, len(body))
		s.write([]byte(body[:k]))
		body = body[k:]
	}
	s.end()
	return s.usage()
}

const openAIJSON = `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\" {}[]"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":4}}}`

const openAISSE = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n" +
	"data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n" +
	": a comment line\n" +
	"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":5,\"total_tokens\":12}}\n\n" +
	"data: [DONE]\n\n"

const anthropicSSE = "event: message_start\r\n" +
	"data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\r\n\r\n" +
	"event: content_block_delta\r\n" +
	"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\r\n\r\n" +
	"event: message_delta\r\n" +
	"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\n" +
	"data: \"usage\":{\"output_tokens\":15}}\r\n\r\n" +
	"event: message_stop\r\n" +
	"data: {\"type\":\"message_stop\"}\r\n\r\n"

func TestUsageScanner(t *testing.T) {
	for _, tc := range []struct {
		name string
		ptrs []string
		sse  bool
		body string
		want int64
		ok   bool
	}{
		{"openai json", []string{"/usage/total_tokens"}, false, openAIJSON, 42, true},
		{"openai json summed", []string{"/usage/prompt_tokens", "/usage/completion_tokens"}, false, openAIJSON, 42, true},
		{"nested", []string{"/usage/prompt_tokens_details/cached_tokens"}, false, openAIJSON, 4, true},
		{"array index", []string{"/choices/0/index"}, false, openAIJSON, 0, true},
		{"openai sse", []string{"/usage/total_tokens"}, true, openAISSE, 12, true},
		{"anthropic sse", []string{"/message/usage/input_tokens", "/usage/output_tokens"}, true, anthropicSSE, 40, true},
		{"gemini", []string{"/usageMetadata/totalTokenCount"}, false, `{"candidates":[],"usageMetadata":{"promptTokenCount":3,"totalTokenCount":9}}`, 9, true},
		{"absent", []string{"/usage/total_tokens"}, false, `{"choices":[]}`, 0, false},
		{"part of a sum", []string{"/message/usage/input_tokens", "/usage/output_tokens"}, false, `{"usage":{"input_tokens":5,"output_tokens":5}}`, 0, false},
		{"null", []string{"/usage/total_tokens"}, false, `{"usage":{"total_tokens":null}}`, 0, false},
		{"string", []string{"/usage/total_tokens"}, false, `{"usage":{"total_tokens":"12"}}`, 0, false},
		{"fraction", []string{"/usage/total_tokens"}, false, `{"usage":{"total_tokens":1.5}}`, 0, false},
		{"negative", []string{"/usage/total_tokens"}, false, `{"usage":{"total_tokens":-3}}`, 0, false},
		{"object", []string{"/usage"}, false, `{"usage":{"total_tokens":3}}`, 0, false},
		// An integer too large for an int64 saturates, as a header's value does
		// (config.ParseDecimal): the upstream cannot lower a charge by reporting more.
		{"largest exact", []string{"/n"}, false, `{"n":999999999999999999}`, 999999999999999999, true},
		{"huge", []string{"/n"}, false, `{"n":12345678901234567890}`, config.DecimalCeiling, true},
		{"huge at the ceiling", []string{"/n"}, false, `{"n":1000000000000000000}`, config.DecimalCeiling, true},
		{"huge at the end", []string{"/n"}, false, `{"n":1} 123456789012345678901234567890`, 1, true},
		{"huge in an event", []string{"/usage/total_tokens"}, true, "data: {\"usage\":{\"total_tokens\":99999999999999999999}}\n\n", config.DecimalCeiling, true},
		{"huge summed", []string{"/a", "/b"}, false, `{"a":99999999999999999999,"b":99999999999999999999}`, 2 * config.DecimalCeiling, true},
		{"huge negative", []string{"/n"}, false, `{"n":-12345678901234567890}`, 0, false},
		{"huge fraction", []string{"/n"}, false, `{"n":12345678901234567890.5}`, 0, false},
		{"huge exponent", []string{"/n"}, false, `{"n":12345678901234567890e3}`, 0, false},
		{"escaped key", []string{"/a~1b/c"}, false, `{"a\/b":{"\u0063":5}}`, 5, true},
		// Events read whole: keys written with escapes are keys all the same.
		{"escaped slash in an event", []string{"/a~1b"}, true, "data: {\"a\\/b\":7}\n\n", 7, true},
		{"escaped letter in an event", []string{"/usage/total_tokens"}, true, "data: {\"usage\":{\"total_tok\\u0065ns\":9}}\n\n", 9, true},
		{"key prefix is no match", []string{"/usage/total"}, false, `{"usage":{"total_tokens":3,"totals":4}}`, 0, false},
		{"last value wins", []string{"/n"}, false, `{"n":1} {"n":2}` + "\n" + `{"n":3}`, 3, true},
		{"a broken document keeps what was found", []string{"/n"}, true, "data: {\"n\":4}\n\ndata: {\"n\" 7}\n\n", 4, true},
		{"deep paths are skipped", []string{"/x"}, false, strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40) + `{"x":8}`, 8, true},
		{"too deep is skipped", []string{"/x"}, false, strings.Repeat(`[`, 70) + strings.Repeat("]", 70), 0, false},
	} {
		spec := pointers(tc.ptrs...)
		for _, n := range []int{0, 1, 2, 7, 9, 1024} {
			got, ok := scanIn(spec, tc.sse, tc.body, n)
			if got != tc.want || ok != tc.ok {
				t.Errorf("%s (chunks of %d): got %d %v, want %d %v", tc.name, n, got, ok, tc.want, tc.ok)
			}
		}
	}
}

// TestUsageScannerSize keeps a stream's scanner, which lives as long as the stream, small.
func TestUsageScannerSize(t *testing.T) {
	if n := unsafe.Sizeof(usageScanner{}); n > 512 {
		t.Errorf("usageScanner is %d bytes", n)
	}
}

// FuzzUsageScanner checks that however a body is cut into chunks the scanner finds the same,
// and that on a body that is JSON it finds what encoding/json does (referenceUsage).
func FuzzUsageScanner(f *testing.F) {
	f.Add([]byte(openAISSE), true)
	f.Add([]byte(anthropicSSE), true)
	f.Add([]byte(openAIJSON), false)
	f.Add([]byte(`{"a\/b":{"c~":3},"usage":{"total_tokens":5,"\u0074otal":[1]}} [[0,7]]`), false)
	f.Add([]byte(`truefalse {"usage":{"total_tokens":3}}`), false)
	f.Fuzz(func(t *testing.T, body []byte, sse bool) {
		checkAgainstReference(t, body, sse, 1, 3, 9)
	})
}

// contentEvent is one event of an OpenAI stream carrying about 1 KB of generated text, the
// chunk an LLM's stream is made of.
var contentEvent = []byte("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" +
	strings.Repeat("token ", 166) + "\"}}],\"usage\":null}\n\n")

// BenchmarkUsageScan measures the scanner on one content event (b.SetBytes: per byte).
func BenchmarkUsageScan(b *testing.B) {
	spec := pointers("/usage/total_tokens")
	var s usageScanner
	s.reset(spec.Pointers, true)
	b.SetBytes(int64(len(contentEvent)))
	for b.Loop() {
		s.write(contentEvent)
	}
}
