package wasmhost

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Repeated request header lines reach the filter as Envoy's header map holds them: a header
// Envoy indexes inline (x-forwarded-for, user-agent, ...) as one entry with the lines joined
// by ",", in the place of its first line; any other header as one entry per line.
func TestRequestHeadersFoldInlineHeaders(t *testing.T) {
	hm := requestHeaders(&Request{Headers: [][2]string{
		{"User-Agent", "a"}, {"x-api-key", "rnd"}, {"x-forwarded-for", "1.1.1.1"},
		{"user-agent", "b"}, {"X-Api-Key", "real"}, {"x-forwarded-for", "2.2.2.2"},
		{"x-request-id", "id"},
	}})
	var got [][2]string
	for _, p := range hm.pairs() {
		if p[0][0] != ':' {
			got = append(got, p)
		}
	}
	assert.Equal(t, [][2]string{
		{"user-agent", "a,b"}, {"x-api-key", "rnd"}, {"x-forwarded-for", "1.1.1.1,2.2.2.2"},
		{"x-api-key", "real"}, {"x-request-id", "id"}, {"x-forwarded-proto", "http"},
	}, got)
	v, _ := hm.get("x-api-key")
	assert.Equal(t, "rnd", v, "a single-value lookup sees the first line, as Envoy's getHeaderMapValue does")
}
