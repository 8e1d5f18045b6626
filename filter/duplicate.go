package filter

import (
	"strconv"

	"github.com/ratelimit-wasm/ratelimit/abi"
	"github.com/ratelimit-wasm/ratelimit/filter/config"
)

// refuseDuplicateKeyHeader asks duplicateKeyHeader about each matched rule that repeats a key
// part, for a request that matched several rules (decideRequest), and reports whether one
// refused the request. It is kept out of line (see doc.go): most requests match one rule,
// whose check decideFrom makes.
//
//go:noinline
func (h *httpContext) refuseDuplicateKeyHeader() bool {
	p := h.plugin
	for _, r := range p.matched {
		if r.RepeatsKeyPart(&p.req) && h.duplicateKeyHeader(r) {
			return true
		}
	}
	return false
}

// duplicateKeyHeader answers 400 when the matched rule r keys on a header or query parameter
// that the request carries more than once and the key part leaves on_duplicate at "reject"
// (see config.Rule.DuplicatePart); it is asked about each matched rule that
// config.Rule.RepeatsKeyPart names, before any rule is decided (refuseDuplicateKeyHeader for
// several matched rules, decideFrom for one). Such a request has no
// unambiguous key: the filter would count one value while the upstream may read another, and
// a client rotating the counted one would never reach its limit. A shadow rule never refuses
// a request; it counts the request (in duplicate_header only) and skips it, like a request
// without its key header. It counts the repeated part and, for an enforced rule, answers the
// request; it reports whether it did. It is a function of its own, kept out of line (see
// doc.go): the check runs on every request, the refusal (its message built byte by byte) only
// on a request it refuses, so a VM's first ordinary request does not compile it.
//
//go:noinline
func (h *httpContext) duplicateKeyHeader(r *config.Rule) (refused bool) {
	kp, dup := r.DuplicatePart(&h.plugin.req)
	if !dup {
		return false
	}
	rs := h.plugin.rules[r.Index]
	rs.m.duplicateHeader.Increment(1)
	if r.Shadow {
		return false
	}
	h.finished = true
	errName, field, what := "duplicate_header", "header", " header"
	if kp.Source == config.SourceQuery {
		errName, field, what = "duplicate_query_parameter", "parameter", " query parameter"
	}
	body := append(append(append(append(append(append(append([]byte(nil),
		`{"error":"`...), errName...), `","rule":"`...), r.Name...), `","`...), field...), `":"`...)
	body = append(append(append(append(append(body, kp.Name...), `","message":"the request carries the `...), kp.Name...),
		what...), ` more than once; send it once"}`...)
	headers := [][2]string{{"content-type", "application/json"}}
	if err := abi.SendHttpResponse(400, headers, body, -1); err != nil {
		abi.LogError("ratelimit: rule " + strconv.Quote(r.Name) + ": sending the local response: " + err.Error())
	}
	return true
}
