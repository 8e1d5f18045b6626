package filter

import (
	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// refuseDuplicateKeyHeader answers 400 when a matched rule keys on a header that the request
// carries more than once and the key part leaves on_duplicate at "reject" (see
// config.Rule.DuplicateHeader). Such a request has no unambiguous key: the filter would count
// one value while the upstream may read another, and a client rotating the counted one would
// never reach its limit. A shadow rule never refuses a request; it counts the request and
// skips it, like a request without its key header.
func (h *httpContext) refuseDuplicateKeyHeader() (action types.Action, refused bool) {
	p := h.plugin
	for _, r := range p.matched {
		name, dup := r.DuplicateHeader(&p.req)
		if !dup {
			continue
		}
		rs := p.rules[r.Index]
		rs.m.duplicateHeader.Increment(1)
		if r.Shadow {
			continue
		}
		h.finished = true
		body := append(append(append(append([]byte(nil),
			`{"error":"duplicate_header","rule":"`...), r.Name...), `","header":"`...), name...)
		body = append(append(append(body, `","message":"the request carries the `...), name...),
			` header more than once; send it once"}`...)
		headers := [][2]string{{"content-type", "application/json"}}
		if err := abi.SendHttpResponse(400, headers, body, -1); err != nil {
			abi.LogErrorf("ratelimit: rule %q: sending the local response: %v", r.Name, err)
		}
		return types.ActionPause, true
	}
	return types.ActionContinue, false
}
