package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// algoErr is the error Parse reports for a rule whose parameters package algorithms
// rejects: the rule's path, then algorithms' own "field: message". The wording belongs to
// that package, so the table asks it rather than copying its text.
func algoErr(prefix string, c algorithms.Config) string {
	_, err := algorithms.New(c)
	if err == nil {
		return "algorithms.New accepted it"
	}
	return prefix + err.Error()
}

// schemaVerdict says what schema.json is expected to say about an invalid config.
type schemaVerdict uint8

const (
	schemaRejects schemaVerdict = iota // the schema can express the rule and rejects the config
	schemaAccepts                      // only Parse can check this (regex syntax, cross-field arithmetic, ...)
	schemaSkip                         // not a JSON document the schema could be applied to
)

type invalidCase struct {
	name   string
	config string
	want   []string // every error, in order, exactly
	schema schemaVerdict
}

// invalidCases are configs that Parse must reject with exactly these errors. The schema
// test runs the same table through schema.json.
var invalidCases = []invalidCase{
	// The document.
	{"empty", ``, []string{"config is empty: at least one rule is required"}, schemaSkip},
	{"whitespace", " \n", []string{"config is empty: at least one rule is required"}, schemaSkip},
	{"truncated", `{"rules":[`, []string{"rules[0]: invalid JSON at byte 10 (line 1, column 11): unexpected end of input"}, schemaSkip},
	{"syntax", `{"rules":[}`, []string{"rules[0]: invalid JSON at byte 10 (line 1, column 11): invalid character '}' at start of value"}, schemaSkip},
	{"trailing data", `{"rules":[{"name":"r",` + tb + `}]} {}`, []string{"invalid JSON: unexpected data after the top-level value, which ends at byte 76 (line 1, column 77)"}, schemaSkip},
	{"not an object", `[]`, []string{"want an object, got an array"}, schemaRejects},
	{"too deep", `{"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, []string{"x" + strings.Repeat("[0]", maxDepth) + ": invalid JSON: nesting is deeper than 32 levels"}, schemaSkip},
	{"syntax in a rule", `{"rules":[{"name":"r",` + tb + `,"key":[{"source":"path"},]}]}`, []string{"rules[0].key[1]: invalid JSON at byte 98 (line 1, column 99): invalid character ',' at start of value"}, schemaSkip},
	{"too large", `{"rules":[],"domain":"` + strings.Repeat("a", MaxConfigBytes) + `"}`, []string{"config is 1048600 bytes; the maximum is 1048576"}, schemaSkip},

	// Top-level fields.
	{"unknown top-level field", `{"rule":[]}`, []string{`rule: unknown field (did you mean "rules"?)`, "rules: required: at least one rule"}, schemaRejects},
	{"unknown field without suggestion", `{"rules":[{"name":"r",` + tb + `}],"zzzzzzzz":1}`, []string{"zzzzzzzz: unknown field"}, schemaRejects},
	{"duplicate key", `{"domain":"a","domain":"b","rules":[{"name":"r",` + tb + `}]}`, []string{"domain: duplicate key"}, schemaAccepts},
	{"domain charset", `{"domain":"a b","rules":[{"name":"r",` + tb + `}]}`, []string{`domain: "a b" must match ^[A-Za-z0-9_.-]{1,64}$`}, schemaRejects},
	{"domain type", `{"domain":7,"rules":[{"name":"r",` + tb + `}]}`, []string{`domain: want a string, got 7`}, schemaRejects},
	{"failure_mode", `{"failure_mode":"open","rules":[{"name":"r",` + tb + `}]}`, []string{`failure_mode: "open" is not one of allow, deny`}, schemaRejects},
	{"cas_attempts zero", `{"cas_attempts":0,"rules":[{"name":"r",` + tb + `}]}`, []string{"cas_attempts: must be between 1 and 64, got 0"}, schemaRejects},
	{"cas_attempts string", `{"cas_attempts":"8","rules":[{"name":"r",` + tb + `}]}`, []string{`cas_attempts: want an integer, got "8"`}, schemaRejects},
	{"cas_attempts fraction", `{"cas_attempts":1.5,"rules":[{"name":"r",` + tb + `}]}`, []string{`cas_attempts: want an integer, got 1.5`}, schemaRejects},
	{"cas_attempts null", `{"cas_attempts":null,"rules":[{"name":"r",` + tb + `}]}`, []string{`cas_attempts: want an integer, got null`}, schemaRejects},
	{"rate_limit_headers", `{"rate_limit_headers":"ietf","rules":[{"name":"r",` + tb + `}]}`, []string{`rate_limit_headers: "ietf" is not one of draft, legacy, both, none`}, schemaRejects},
	{"trusted_hops high", `{"trusted_hops":17,"rules":[{"name":"r",` + tb + `}]}`, []string{"trusted_hops: must be between 0 and 16, got 17"}, schemaRejects},
	{"trusted_hops negative", `{"trusted_hops":-1,"rules":[{"name":"r",` + tb + `}]}`, []string{"trusted_hops: must be between 0 and 16, got -1"}, schemaRejects},
	{"max_keys zero", `{"max_keys":0,"rules":[{"name":"r",` + tb + `}]}`, []string{"max_keys: must be between 1 and 1000000, got 0"}, schemaRejects},
	{"max_keys huge", `{"max_keys":99999999999999999999,"rules":[{"name":"r",` + tb + `}]}`, []string{"max_keys: must be between 1 and 1000000, got 99999999999999999999"}, schemaRejects},
	{"max_key_bytes small", `{"max_key_bytes":15,"rules":[{"name":"r",` + tb + `}]}`, []string{"max_key_bytes: must be between 16 and 65536, got 15"}, schemaRejects},
	{"max_key_bytes large", `{"max_key_bytes":65537,"rules":[{"name":"r",` + tb + `}]}`, []string{"max_key_bytes: must be between 16 and 65536, got 65537"}, schemaRejects},
	{"max_key_bytes type", `{"max_key_bytes":"1KiB","rules":[{"name":"r",` + tb + `}]}`, []string{`max_key_bytes: want an integer, got "1KiB"`}, schemaRejects},

	// The rules list.
	{"rules missing", `{}`, []string{"rules: required: at least one rule"}, schemaRejects},
	{"rules empty", `{"rules":[]}`, []string{"rules: must not be empty"}, schemaRejects},
	{"rules not a list", `{"rules":{}}`, []string{"rules: want an array, got an object"}, schemaRejects},
	{"too many rules", `{"rules":[` + strings.Repeat(`{},`, 256) + `{}]}`, []string{"rules: has 257 items; the maximum is 256"}, schemaRejects},
	{"rule not an object", `{"rules":["r"]}`, []string{`rules[0]: want an object, got "r"`}, schemaRejects},
	{"rule typo", oneRule(`"algorithm":"token_bucket","limt":10,"window":"1s"`), []string{`rules[0].limt: unknown field (did you mean "limit"?)`, "rules[0].limit: required"}, schemaRejects},

	// Names.
	{"name missing", `{"rules":[{` + tb + `}]}`, []string{"rules[0].name: required"}, schemaRejects},
	{"name charset", `{"rules":[{"name":"a b",` + tb + `}]}`, []string{`rules[0].name: "a b" must match ^[A-Za-z0-9_.-]{1,64}$`}, schemaRejects},
	// The rule name becomes a stat tag (";rule=<name>"): a ';' or '=' in it would forge
	// another tag, or another rule's stat, through Envoy's tag extraction.
	{"name forging a stat tag", `{"rules":[{"name":"x;decision=allowed",` + tb + `}]}`, []string{`rules[0].name: "x;decision=allowed" must match ^[A-Za-z0-9_.-]{1,64}$`}, schemaRejects},
	{"name with '='", `{"rules":[{"name":"rule=x",` + tb + `}]}`, []string{`rules[0].name: "rule=x" must match ^[A-Za-z0-9_.-]{1,64}$`}, schemaRejects},
	{"name too long", `{"rules":[{"name":"` + strings.Repeat("n", 65) + `",` + tb + `}]}`, []string{`rules[0].name: "` + strings.Repeat("n", 64) + `"... must match ^[A-Za-z0-9_.-]{1,64}$`}, schemaRejects},
	{"name duplicate", `{"rules":[{"name":"api",` + tb + `},{"name":"x",` + tb + `},{"name":"api",` + tb + `}]}`, []string{`rules[2].name: duplicate of rules[0].name "api"`}, schemaAccepts},
	// Names that Prometheus cannot tell apart: the plugin and the check command both refuse
	// them through Parse.
	{"name flat duplicate", `{"rules":[{"name":"a.b-c",` + tb + `},{"name":"x",` + tb + `},{"name":"a_b_c",` + tb + `}]}`,
		[]string{`rules[2].name: "a_b_c" and rules[0].name "a.b-c" differ only in '.', '-' and '_', which Prometheus names cannot tell apart; rename one`}, schemaAccepts},

	// Algorithm and parameters.
	{"algorithm missing", oneRule(`"limit":10,"window":"1s"`), []string{"rules[0].algorithm: required"}, schemaRejects},
	{"algorithm unknown", oneRule(`"algorithm":"token-bucket","limit":10,"window":"1s"`), []string{`rules[0].algorithm: "token-bucket" is not one of token_bucket, leaky_bucket, sliding_window, fixed_window, gcra, adaptive (did you mean "token_bucket"?)`}, schemaRejects},
	{"limit string", oneRule(`"algorithm":"gcra","limit":"100","window":"1s"`), []string{`rules[0].limit: want an integer, got "100"`}, schemaRejects},
	{"limit zero", oneRule(`"algorithm":"gcra","limit":0,"window":"1s"`), []string{"rules[0].limit: must be between 1 and 1000000000, got 0"}, schemaRejects},
	{"limit negative", oneRule(`"algorithm":"gcra","limit":-3,"window":"1s"`), []string{"rules[0].limit: must be between 1 and 1000000000, got -3"}, schemaRejects},
	{"limit exponent", oneRule(`"algorithm":"gcra","limit":1e3,"window":"1s"`), []string{"rules[0].limit: want an integer, got 1e3"}, schemaAccepts},
	{"limit missing", oneRule(`"algorithm":"gcra","window":"1s"`), []string{"rules[0].limit: required"}, schemaRejects},
	{"window missing", oneRule(`"algorithm":"gcra","limit":1`), []string{"rules[0].window: required"}, schemaRejects},
	{"window bare number", oneRule(`"algorithm":"gcra","limit":1,"window":"10"`), []string{`rules[0].window: "10" has no unit`}, schemaRejects},
	{"window number", oneRule(`"algorithm":"gcra","limit":1,"window":10`), []string{`rules[0].window: want a duration string like "1s", got 10`}, schemaRejects},
	{"window negative", oneRule(`"algorithm":"gcra","limit":1,"window":"-1s"`), []string{`rules[0].window: must be positive, got "-1s"`}, schemaRejects},
	{"window zero", oneRule(`"algorithm":"gcra","limit":1,"window":"0s"`), []string{`rules[0].window: must be positive, got "0s"`}, schemaAccepts},
	{"window unit", oneRule(`"algorithm":"gcra","limit":1,"window":"1x"`), []string{`rules[0].window: "1x" has unknown unit "x" (want ns, us, ms, s, m, h or d)`}, schemaRejects},
	{"window trailing number", oneRule(`"algorithm":"gcra","limit":1,"window":"1h30"`), []string{`rules[0].window: "1h30" ends in a number with no unit`}, schemaRejects},
	{"window too long", oneRule(`"algorithm":"gcra","limit":1,"window":"32d"`), []string{`rules[0].window: must be between 1ms and 31d, got "32d"`}, schemaAccepts},
	{"window overflow", oneRule(`"algorithm":"gcra","limit":1,"window":"9999999999h"`), []string{`rules[0].window: "9999999999h" is too large`}, schemaAccepts},
	{"burst on fixed_window", oneRule(`"algorithm":"fixed_window","limit":1,"window":"1s","burst":5`), []string{"rules[0].burst: not used by fixed_window"}, schemaRejects},
	{"burst zero", oneRule(`"algorithm":"token_bucket","limit":1,"window":"1s","burst":0`), []string{"rules[0].burst: must be between 1 and 1000000000, got 0"}, schemaRejects},
	{"variant on gcra", oneRule(`"algorithm":"gcra","limit":1,"window":"1s","variant":"log"`), []string{"rules[0].variant: not used by gcra"}, schemaRejects},
	{"variant unknown", oneRule(`"algorithm":"sliding_window","limit":1,"window":"1s","variant":"exact"`), []string{`rules[0].variant: "exact" is not one of counter, log`}, schemaRejects},
	{"log limit", oneRule(`"algorithm":"sliding_window","variant":"log","limit":2000,"window":"1s"`), []string{
		algoErr("rules[0].", algorithms.Config{Algorithm: "sliding_window", Variant: "log", Limit: 2000, Window: time.Second})}, schemaAccepts},
	{"window not whole ms", oneRule(`"algorithm":"fixed_window","limit":5,"window":"1500us"`), []string{
		algoErr("rules[0].", algorithms.Config{Algorithm: "fixed_window", Limit: 5, Window: 1500 * time.Microsecond})}, schemaAccepts},
	{"adaptive interval not whole ms", oneRule(`"algorithm":"adaptive","window":"1s","adaptive":{"min_limit":1,"max_limit":5,"interval":"100.5ms"}`), []string{
		"rules[0].adaptive.interval: must be a whole number of milliseconds, got 100.5ms"}, schemaAccepts},
	{"more than one per ns", oneRule(`"algorithm":"gcra","limit":1000000000,"window":"1ms"`), []string{
		algoErr("rules[0].", algorithms.Config{Algorithm: "gcra", Limit: 1000000000, Window: time.Millisecond})}, schemaAccepts},
	{"constant cost above capacity", oneRule(`"algorithm":"token_bucket","limit":10,"window":"1s","cost":20`), []string{"rules[0].cost: every request costs 20, more than the rule ever allows (limit 10)"}, schemaAccepts},
	{"constant cost above burst", oneRule(`"algorithm":"gcra","limit":10,"burst":3,"window":"1s","cost":4`), []string{"rules[0].cost: every request costs 4, more than the rule ever allows (burst 3)"}, schemaAccepts},
	{"shape on token_bucket", oneRule(`"algorithm":"token_bucket","limit":1,"window":"1s","mode":"shape","max_delay":"1s"`), []string{`rules[0].mode: "shape" needs algorithm leaky_bucket`}, schemaRejects},
	{"shape without max_delay", oneRule(`"algorithm":"leaky_bucket","limit":1,"window":"1s","mode":"shape"`), []string{`rules[0].max_delay: required when mode is "shape"`}, schemaRejects},
	{"max_delay without shape", oneRule(`"algorithm":"leaky_bucket","limit":1,"window":"1s","max_delay":"1s"`), []string{`rules[0].max_delay: not used by mode "meter" (max_delay needs mode "shape")`}, schemaRejects},
	{"max_delay too long", oneRule(`"algorithm":"leaky_bucket","limit":1,"window":"1s","mode":"shape","max_delay":"2m"`), []string{`rules[0].max_delay: must be between 1ms and 1m, got "2m"`}, schemaAccepts},
	{"mode unknown", oneRule(`"algorithm":"leaky_bucket","limit":1,"window":"1s","mode":"queue"`), []string{`rules[0].mode: "queue" is not one of meter, shape`}, schemaRejects},
	{"scope unknown", oneRule(`"algorithm":"gcra","limit":1,"window":"1s","scope":"cluster"`), []string{`rules[0].scope: "cluster" is not one of local, global`}, schemaRejects},
	{"global without redis", `{"rules":[{"name":"a",` + tb + `},{"name":"b",` + tb + `,"scope":"global"}]}`, []string{`redis: required because rules[1] has scope "global"`}, schemaRejects},
	{"global shaping", `{"redis":{"cluster":"c"},"rules":[{"name":"r","algorithm":"leaky_bucket","limit":1,"window":"1s","mode":"shape","max_delay":"1s","scope":"global"}]}`, []string{`rules[0].scope: "global" is not supported with mode "shape": a delay cannot be scheduled across proxies`}, schemaRejects},

	// Adaptive.
	{"adaptive missing", oneRule(`"algorithm":"adaptive","window":"1s"`), []string{"rules[0].adaptive: required for algorithm adaptive"}, schemaRejects},
	{"adaptive on gcra", oneRule(`"algorithm":"gcra","limit":1,"window":"1s","adaptive":{"min_limit":1,"max_limit":2,"target_latency":"1s"}`), []string{"rules[0].adaptive: not used by gcra"}, schemaRejects},
	{"adaptive global", `{"redis":{"cluster":"c"},"rules":[{"name":"r","algorithm":"adaptive","window":"1s","scope":"global","adaptive":{"min_limit":1,"max_limit":2,"target_latency":"1s"}}]}`, []string{`rules[0].scope: "global" is not supported by adaptive: it tunes the limit from each proxy's own latency and errors`}, schemaRejects},
	{"adaptive min above max", oneRule(`"algorithm":"adaptive","window":"1s","adaptive":{"min_limit":5,"max_limit":2,"target_latency":"1s"}`), []string{"rules[0].adaptive.min_limit: must be <= max_limit (2), got 5"}, schemaAccepts},
	{"adaptive limit outside", oneRule(`"algorithm":"adaptive","window":"1s","limit":9,"adaptive":{"min_limit":1,"max_limit":5,"target_latency":"1s"}`), []string{"rules[0].limit: must be between adaptive.min_limit (1) and adaptive.max_limit (5), got 9"}, schemaAccepts},
	{"adaptive fields", oneRule(`"algorithm":"adaptive","window":"1s","adaptive":{"min_limit":0,"error_threshold":1.5,"interval":"10ms","target":"1s"}`), []string{
		"rules[0].adaptive.target: unknown field",
		"rules[0].adaptive.min_limit: must be between 1 and 1000000000, got 0",
		"rules[0].adaptive.max_limit: required",
		"rules[0].adaptive.error_threshold: must be between 0 and 1, got 1.5",
		`rules[0].adaptive.interval: must be between 100ms and 1h, got "10ms"`,
	}, schemaRejects},
	{"adaptive no signal", oneRule(`"algorithm":"adaptive","window":"1s","adaptive":{"min_limit":1,"max_limit":5,"error_threshold":0}`), []string{"rules[0].adaptive: needs target_latency or a non-zero error_threshold: with neither signal the limit never moves"}, schemaAccepts},

	// Cost.
	{"cost header max above capacity", oneRule(`"algorithm":"token_bucket","limit":10,"window":"1s","cost":{"header":"x-cost","max":20}`),
		[]string{"rules[0].cost.max: a request with the header at 20 (or an invalid value) would never be admitted: the rule allows at most 10 (limit); lower max to at most that"}, schemaAccepts},
	{"cost header max above burst", oneRule(`"algorithm":"gcra","limit":10,"burst":3,"window":"1s","cost":{"header":"x-cost","max":4,"default":1}`),
		[]string{"rules[0].cost.max: a request with the header at 4 (or an invalid value) would never be admitted: the rule allows at most 3 (burst); lower max to at most that"}, schemaAccepts},
	{"cost header max above adaptive max_limit", oneRule(`"algorithm":"adaptive","window":"1s","adaptive":{"min_limit":1,"max_limit":5,"target_latency":"1s"},"cost":{"header":"x-cost","max":6}`),
		[]string{"rules[0].cost.max: a request with the header at 6 (or an invalid value) would never be admitted: the rule allows at most 5 (adaptive.max_limit); lower max to at most that"}, schemaAccepts},
	{"override below a cost header's max", oneRule(tb + `,"cost":{"header":"x-cost","max":5},"key":[{"source":"header","name":"k"}],"overrides":[{"exact":"a","limit":2}]`),
		[]string{"rules[0].overrides[0].cost.max: a request with the header at 5 (or an invalid value) would never be admitted: the rule allows at most 2 (limit); lower max to at most that"}, schemaAccepts},
	{"cost string", oneRule(tb + `,"cost":"2"`), []string{`rules[0].cost: want an integer or an object {header, default, max} or {reserve, usage, max, on_missing}, got "2"`}, schemaRejects},
	{"cost zero", oneRule(tb + `,"cost":0`), []string{"rules[0].cost: must be between 1 and 1000000, got 0"}, schemaRejects},
	{"cost header without max", oneRule(tb + `,"cost":{"header":"x-cost"}`), []string{"rules[0].cost.max: required: it bounds what one request can cost and is charged for invalid values"}, schemaRejects},
	{"cost default above max", oneRule(tb + `,"cost":{"header":"x-cost","max":5,"default":6}`), []string{"rules[0].cost.default: must be <= max (5), got 6"}, schemaAccepts},
	{"cost header name", oneRule(tb + `,"cost":{"header":"x cost","max":5,"dflt":1}`), []string{"rules[0].cost.dflt: unknown field", `rules[0].cost.header: "x cost" is not a valid header name`}, schemaRejects},

	// Key parts.
	{"key not a list", oneRule(tb + `,"key":{"source":"path"}`), []string{"rules[0].key: want an array, got an object"}, schemaRejects},
	{"key source missing", oneRule(tb + `,"key":[{"name":"x"}]`), []string{"rules[0].key[0].source: required"}, schemaRejects},
	{"key source unknown", oneRule(tb + `,"key":[{"source":"cookie","name":"x"}]`), []string{`rules[0].key[0].source: "cookie" is not one of client_ip, header, query, path, method, route, const`}, schemaRejects},
	{"key header without name", oneRule(tb + `,"key":[{"source":"header"}]`), []string{`rules[0].key[0].name: required for source "header"`}, schemaRejects},
	{"key name on path", oneRule(tb + `,"key":[{"source":"path","name":"x"}]`), []string{`rules[0].key[0].name: not used by source "path"`}, schemaRejects},
	{"key value on header", oneRule(tb + `,"key":[{"source":"header","name":"x","value":"y"}]`), []string{`rules[0].key[0].value: not used by source "header"`}, schemaRejects},
	{"key const without value", oneRule(tb + `,"key":[{"source":"const"}]`), []string{`rules[0].key[0].value: required for source "const"`}, schemaRejects},
	{"key const default", oneRule(tb + `,"key":[{"source":"const","value":"v","default":"d"}]`), []string{`rules[0].key[0].default: not used by source "const": a constant is never missing`}, schemaRejects},
	{"key prefix on header", oneRule(tb + `,"key":[{"source":"header","name":"x","ipv4_prefix":24}]`), []string{`rules[0].key[0].ipv4_prefix: not used by source "header"`}, schemaRejects},
	{"key prefix range", oneRule(tb + `,"key":[{"source":"client_ip","ipv4_prefix":33,"ipv6_prefix":0}]`), []string{"rules[0].key[0].ipv4_prefix: must be between 1 and 32, got 33", "rules[0].key[0].ipv6_prefix: must be between 1 and 128, got 0"}, schemaRejects},
	{"key on_duplicate unknown", oneRule(tb + `,"key":[{"source":"header","name":"x","on_duplicate":"join"}]`), []string{`rules[0].key[0].on_duplicate: "join" is not one of reject, first, last`}, schemaRejects},
	{"key on_duplicate on path", oneRule(tb + `,"key":[{"source":"path","on_duplicate":"first"}]`), []string{`rules[0].key[0].on_duplicate: not used by source "path"`}, schemaRejects},
	{"key on_duplicate on query unknown", oneRule(tb + `,"key":[{"source":"query","name":"x","on_duplicate":"join"}]`), []string{`rules[0].key[0].on_duplicate: "join" is not one of reject, first, last`}, schemaRejects},
	{"key query name empty", oneRule(tb + `,"key":[{"source":"query","name":""}]`), []string{"rules[0].key[0].name: must not be empty"}, schemaRejects},
	{"key header name", oneRule(tb + `,"key":[{"source":"header","name":"x:y"}]`), []string{`rules[0].key[0].name: "x:y" is not a valid header name`}, schemaRejects},
	{"key header name lower-cased to ASCII", oneRule(tb + `,"key":[{"source":"header","name":"x-\u212a"}]`), []string{"rules[0].key[0].name: \"x-\u212a\" is not a valid header name"}, schemaRejects},
	{"key too long", oneRule(tb + `,"key":[` + strings.Repeat(`{"source":"path"},`, 16) + `{"source":"path"}]`), []string{"rules[0].key: has 17 items; the maximum is 16"}, schemaRejects},

	// Match.
	{"match not an object", oneRule(tb + `,"match":[]`), []string{"rules[0].match: want an object, got an array"}, schemaRejects},
	{"match unknown", oneRule(tb + `,"match":{"route":["a"]}`), []string{`rules[0].match.route: unknown field (did you mean "routes"?)`}, schemaRejects},
	{"routes empty", oneRule(tb + `,"match":{"routes":[]}`), []string{"rules[0].match.routes: must not be empty (omit it to match all routes)"}, schemaRejects},
	{"routes type", oneRule(tb + `,"match":{"routes":["a",1]}`), []string{"rules[0].match.routes[1]: want a string, got 1"}, schemaRejects},
	{"path two kinds", oneRule(tb + `,"match":{"path":{"exact":"/a","regex":"/b"}}`), []string{"rules[0].match.path: want exactly one of exact, prefix, regex, got exact and regex"}, schemaRejects},
	{"path no kind", oneRule(tb + `,"match":{"path":{}}`), []string{"rules[0].match.path: want exactly one of exact, prefix, regex"}, schemaRejects},
	{"path regex syntax", oneRule(tb + `,"match":{"path":{"regex":"/(a"}}`), []string{"rules[0].match.path.regex: error parsing regexp: missing closing ): `/(a`"}, schemaAccepts},
	{"path regex too long", oneRule(tb + `,"match":{"path":{"regex":"` + strings.Repeat("a", 1025) + `"}}`), []string{"rules[0].match.path.regex: is 1025 bytes long; the maximum is 1024"}, schemaRejects},
	{"path relative", oneRule(tb + `,"match":{"path":{"exact":"login"}}`), []string{`rules[0].match.path.exact: "login" must start with "/"`}, schemaRejects},
	{"path with query", oneRule(tb + `,"match":{"path":{"prefix":"/a?b=1"}}`), []string{`rules[0].match.path.prefix: "/a?b=1" must not contain a query string: paths are matched without it`}, schemaRejects},
	{"method lower-case", oneRule(tb + `,"match":{"methods":["GET","post"]}`), []string{`rules[0].match.methods[1]: "post" is not an upper-case method token (like GET)`}, schemaRejects},
	{"header name missing", oneRule(tb + `,"match":{"headers":[{"present":true}]}`), []string{"rules[0].match.headers[0].name: required"}, schemaRejects},
	{"header two kinds", oneRule(tb + `,"match":{"headers":[{"name":"a","present":true,"exact":"x"}]}`), []string{"rules[0].match.headers[0]: want exactly one of present, exact, prefix, regex, got present and exact"}, schemaRejects},
	{"header empty prefix", oneRule(tb + `,"match":{"headers":[{"name":"a","prefix":""}]}`), []string{`rules[0].match.headers[0].prefix: must not be empty (use "present": true)`}, schemaRejects},
	{"header regex syntax", oneRule(tb + `,"match":{"headers":[{"name":"a","regex":"a**"}]}`), []string{"rules[0].match.headers[0].regex: error parsing regexp: invalid nested repetition operator: `**`"}, schemaAccepts},
	{"header invert type", oneRule(tb + `,"match":{"headers":[{"name":"a","present":true,"invert":"yes"}]}`), []string{`rules[0].match.headers[0].invert: want true or false, got "yes"`}, schemaRejects},

	// Deny.
	{"deny status", `{"deny":{"status":200},"rules":[{"name":"r",` + tb + `}]}`, []string{"deny.status: must be between 400 and 599, got 200"}, schemaRejects},
	{"deny placeholder", `{"deny":{"body":"wait %RETRYAFTER%s"},"rules":[{"name":"r",` + tb + `}]}`, []string{`deny.body: unknown placeholder "%RETRYAFTER%" (known: %RULE%, %RETRY_AFTER%)`}, schemaAccepts},
	{"deny reserved header", `{"deny":{"headers":{"Retry-After":"5"}},"rules":[{"name":"r",` + tb + `}]}`, []string{"deny.headers.Retry-After: cannot be set here: set by the filter"}, schemaRejects},
	{"deny header name", `{"deny":{"headers":{"a b":"5"}},"rules":[{"name":"r",` + tb + `}]}`, []string{`deny.headers["a b"]: "a b" is not a valid header name`}, schemaRejects},
	{"deny header name lower-cased to ASCII", `{"deny":{"headers":{"x-\u0130":"5"}},"rules":[{"name":"r",` + tb + `}]}`, []string{`deny.headers["x-İ"]: "x-İ" is not a valid header name`}, schemaRejects},
	{"deny header value", `{"deny":{"headers":{"x-a":"1\r\nset-cookie: a=b"}},"rules":[{"name":"r",` + tb + `}]}`, []string{`deny.headers.x-a: "1\r\nset-cookie: a=b" contains control characters`}, schemaAccepts},
	{"deny header duplicate", `{"deny":{"headers":{"X-A":"1","x-a":"2"}},"rules":[{"name":"r",` + tb + `}]}`, []string{`deny.headers.x-a: duplicate of header "X-A" (header names are case-insensitive)`}, schemaAccepts},
	{"deny headers type", `{"deny":{"headers":["x"]},"rules":[{"name":"r",` + tb + `}]}`, []string{"deny.headers: want an object of header names to values, got an array"}, schemaRejects},
	{"deny content type", `{"deny":{"content_type":""},"rules":[{"name":"r",` + tb + `}]}`, []string{`deny.content_type: "" is not a valid content type`}, schemaRejects},
	{"rule deny", oneRule(tb + `,"deny":{"status":"429"}`), []string{`rules[0].deny.status: want an integer, got "429"`}, schemaRejects},
	{"rule overrides", oneRule(tb + `,"max_keys":0,"rate_limit_headers":"all","shadow":1,"continue":"no"`), []string{
		"rules[0].shadow: want true or false, got 1",
		`rules[0].continue: want true or false, got "no"`,
		"rules[0].max_keys: must be between 1 and 1000000, got 0",
		`rules[0].rate_limit_headers: "all" is not one of draft, legacy, both, none`,
	}, schemaRejects},

	// Redis.
	{"redis cluster missing", `{"redis":{"timeout":"20s"},"rules":[{"name":"r",` + tb + `}]}`, []string{"redis.cluster: required", `redis.timeout: must be between 1ms and 10s, got "20s"`}, schemaRejects},
	{"redis fields", `{"redis":{"cluster":"c","failure_mode":"fail","key_prefix":"a b","authority":"a/b","breaker":{"failures":0,"cooldown":"1s","open":true}},"rules":[{"name":"r",` + tb + `}]}`, []string{
		`redis.authority: "a/b" is not a valid authority (want host or host:port, the port at most 65535)`,
		`redis.key_prefix: "a b" must match ^[A-Za-z0-9_.:{}-]{1,64}$`,
		`redis.failure_mode: "fail" is not one of allow, deny, local`,
		"redis.breaker.open: unknown field",
		"redis.breaker.failures: must be between 1 and 1000, got 0",
	}, schemaRejects},
	{"redis authority port", `{"redis":{"cluster":"c","authority":"h:99999"},"rules":[{"name":"r",` + tb + `}]}`, []string{
		`redis.authority: "h:99999" is not a valid authority (want host or host:port, the port at most 65535)`,
	}, schemaAccepts},
	{"redis key_prefix empty hash tag", `{"redis":{"cluster":"c","key_prefix":"a}{}b"},"rules":[{"name":"r",` + tb + `}]}`, []string{
		`redis.key_prefix: "a}{}b" starts an empty hash tag "{}", which makes Redis hash the whole key; put a name between the braces`,
	}, schemaRejects},
	{"redis key_prefix only an empty hash tag", `{"redis":{"cluster":"c","key_prefix":"{}"},"rules":[{"name":"r",` + tb + `}]}`, []string{
		`redis.key_prefix: "{}" starts an empty hash tag "{}", which makes Redis hash the whole key; put a name between the braces`,
	}, schemaRejects},

	// Deny like Envoy.
	// 0 is OK: a gRPC client would take the denial for a successful call without a reply.
	{"grpc_status OK", `{"deny":{"grpc_status":0},"rules":[{"name":"r",` + tb + `}]}`,
		[]string{"deny.grpc_status: 0 is not allowed; use 8 (RESOURCE_EXHAUSTED) or 14 (UNAVAILABLE)"}, schemaRejects},
	{"grpc_status not 8 or 14", `{"deny":{"grpc_status":9},"rules":[{"name":"r",` + tb + `}]}`,
		[]string{"deny.grpc_status: 9 is not allowed; use 8 (RESOURCE_EXHAUSTED) or 14 (UNAVAILABLE)"}, schemaRejects},
	{"envoy_ratelimited_header type", `{"deny":{"envoy_ratelimited_header":"yes"},"rules":[{"name":"r",` + tb + `}]}`,
		[]string{`deny.envoy_ratelimited_header: want true or false, got "yes"`}, schemaRejects},
	{"x-envoy-ratelimited as a deny header", `{"deny":{"headers":{"X-Envoy-RateLimited":"true"}},"rules":[{"name":"r",` + tb + `}]}`,
		[]string{`deny.headers.X-Envoy-RateLimited: cannot be set here: set by the filter; see "envoy_ratelimited_header"`}, schemaRejects},
	{"grpc-status as a deny header", `{"deny":{"headers":{"Grpc-Status":"0","grpc-message":"ok"}},"rules":[{"name":"r",` + tb + `}]}`,
		[]string{`deny.headers.Grpc-Status: cannot be set here: set by Envoy for a gRPC request; see "grpc_status"`,
			`deny.headers.grpc-message: cannot be set here: set by Envoy for a gRPC request; see "grpc_status"`}, schemaRejects},

	// Shadow options only on shadow rules.
	{"shadow_headers on an enforced rule", oneRule(tb + `,"shadow_headers":true`),
		[]string{`rules[0].shadow_headers: only allowed with "shadow": true`}, schemaAccepts},
	{"shadow_request_header on an enforced rule", oneRule(tb + `,"shadow_request_header":"x-would-deny"`),
		[]string{`rules[0].shadow_request_header: only allowed with "shadow": true or an enforce_percent below 100`}, schemaAccepts},
	{"enforce_percent on a shadow rule", oneRule(tb + `,"shadow":true,"enforce_percent":50`),
		[]string{`rules[0].enforce_percent: not allowed with "shadow": true, which enforces no denial`}, schemaAccepts},
	{"enforce_percent and near_limit_ratio out of range", `{"enforce_percent":101,"near_limit_ratio":-0.1,"rules":[{"name":"r",` + tb + `,"enforce_percent":"50","near_limit_ratio":1.5}]}`,
		[]string{
			"enforce_percent: must be between 0 and 100, got 101",
			"near_limit_ratio: must be between 0 and 1, got -0.1",
			`rules[0].enforce_percent: want a number, got "50"`,
			"rules[0].near_limit_ratio: must be between 0 and 1, got 1.5",
		}, schemaRejects},
	{"shadow_request_header not a header name", oneRule(tb + `,"shadow":true,"shadow_request_header":"x y"`),
		[]string{`rules[0].shadow_request_header: "x y" is not a valid header name`}, schemaRejects},
	{"shadow_request_header read by the config", `{"trusted_hops":1,"rules":[` +
		`{"name":"k",` + tb + `,"key":[{"source":"header","name":"x-api-key"}],"shadow":true,"shadow_request_header":"X-Api-Key"},` +
		`{"name":"m",` + tb + `,"match":{"headers":[{"name":"x-tenant","present":true}]},"shadow":true,"shadow_request_header":"x-tenant"},` +
		`{"name":"c",` + tb + `,"cost":{"header":"x-cost","default":1,"max":5},"shadow":true,"shadow_request_header":"x-cost"},` +
		`{"name":"e",` + tb + `,"enforce_percent":50,"shadow_request_header":"x-request-id"},` +
		`{"name":"f",` + tb + `,"shadow":true,"shadow_request_header":"x-forwarded-for"}]}`,
		[]string{
			`rules[0].shadow_request_header: "x-api-key" is read by rules[0].key[0], and the filter removes it from every request (a client must not send it)`,
			`rules[1].shadow_request_header: "x-tenant" is read by rules[1].match.headers[0], and the filter removes it from every request (a client must not send it)`,
			`rules[2].shadow_request_header: "x-cost" is read by rules[2].cost, and the filter removes it from every request (a client must not send it)`,
			`rules[3].shadow_request_header: "x-request-id" is read by rules[3].enforce_percent, and the filter removes it from every request (a client must not send it)`,
			`rules[4].shadow_request_header: "x-forwarded-for" is read by trusted_hops, and the filter removes it from every request (a client must not send it)`,
		}, schemaAccepts},
	{"shadow_request_header content-type", oneRule(tb + `,"shadow":true,"shadow_request_header":"Content-Type"`),
		[]string{`rules[0].shadow_request_header: "content-type" is read by the denial (it tells a gRPC request apart), and the filter removes it from every request (a client must not send it)`}, schemaAccepts},

	// Per-value overrides.
	{"overrides without a key", oneRule(tb + `,"overrides":[{"exact":"a","limit":5}]`),
		[]string{`rules[0].overrides: needs a "key": an override gives key values their own limit`}, schemaAccepts},
	{"override without exact or prefix", oneRule(tb + `,"key":[{"source":"header","name":"k"}],"overrides":[{"limit":5}]`),
		[]string{`rules[0].overrides[0]: one of "exact" or "prefix" is required`}, schemaRejects},
	{"override with exact and prefix", oneRule(tb + `,"key":[{"source":"header","name":"k"}],"overrides":[{"exact":"a","prefix":"b","limit":5}]`),
		[]string{`rules[0].overrides[0]: give one of "exact" or "prefix", not both`}, schemaRejects},
	{"override empty prefix", oneRule(tb + `,"key":[{"source":"header","name":"k"}],"overrides":[{"prefix":"","limit":5}]`),
		[]string{`rules[0].overrides[0].prefix: must not be empty (an empty prefix matches every value: change the rule's limit instead)`}, schemaRejects},
	{"override without a limit", oneRule(tb + `,"key":[{"source":"header","name":"k"}],"overrides":[{"exact":"a"}]`),
		[]string{`rules[0].overrides[0]: needs "limit", "window" or "burst", or "unlimited": true`}, schemaAccepts},
	{"unlimited override with a limit", oneRule(tb + `,"key":[{"source":"header","name":"k"}],"overrides":[{"exact":"a","unlimited":true,"limit":5}]`),
		[]string{`rules[0].overrides[0].limit: not used with "unlimited": true`}, schemaAccepts},
	{"override part out of range", oneRule(tb + `,"key":[{"source":"header","name":"k"}],"overrides":[{"part":1,"exact":"a","limit":5}]`),
		[]string{`rules[0].overrides[0].part: must be between 0 and 0, got 1`}, schemaAccepts},
	{"duplicate override", oneRule(tb + `,"key":[{"source":"header","name":"k"}],"overrides":[{"exact":"a","limit":5},{"exact":"a","limit":6}]`),
		[]string{`rules[0].overrides[1]: duplicate of rules[0].overrides[0]`}, schemaAccepts},
	{"override on adaptive", oneRule(`"algorithm":"adaptive","window":"1s","adaptive":{"min_limit":1,"max_limit":10},"key":[{"source":"header","name":"k"}],"overrides":[{"exact":"a","limit":5}]`),
		[]string{`rules[0].overrides: not supported by adaptive: its controller tunes one limit per rule`}, schemaAccepts},
	{"override burst on gcra cost", oneRule(tb + `,"cost":5,"key":[{"source":"header","name":"k"}],"overrides":[{"exact":"a","limit":2}]`),
		[]string{`rules[0].overrides[0].cost: every request costs 5, more than the rule ever allows (limit 2)`}, schemaAccepts},

	// Many problems at once are all reported, in document order.
	{"several rules", `{"rules":[{"name":"a","algorithm":"gcra","limit":"100","window":"1s"},{"name":"b","algorithm":"token_bucket","limit":5,"window":"10"},{"name":"a",` + tb + `}]}`, []string{
		`rules[0].limit: want an integer, got "100"`,
		`rules[1].window: "10" has no unit`,
		`rules[2].name: duplicate of rules[0].name "a"`,
	}, schemaRejects},
}

func TestParseInvalid(t *testing.T) {
	for _, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.config))
			if err == nil {
				t.Fatalf("Parse accepted %s", tc.config)
			}
			if c != nil {
				t.Errorf("Parse returned a config together with an error")
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error is %T, want Errors", err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors:\n got: %q\nwant: %q", got, tc.want)
			}
			if err.Error() != strings.Join(tc.want, "\n") {
				t.Errorf("Error() = %q", err.Error())
			}
			// Each problem is also reachable as an *Error with its path.
			var first *Error
			if !errors.As(err, &first) || first != es[0] {
				t.Errorf("errors.As(*Error) did not find the first problem")
			}
		})
	}
}

func TestParseErrorCap(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"rules":[`)
	for i := 0; i < 150; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"r` + strings.Repeat("x", i%3) + `","bogus":1}`)
	}
	b.WriteString(`]}`)
	_, err := Parse([]byte(b.String()))
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v", err)
	}
	if len(es) != maxErrors+1 {
		t.Fatalf("got %d errors, want %d", len(es), maxErrors+1)
	}
	if last := es[len(es)-1].Error(); !strings.HasPrefix(last, "... and ") || !strings.HasSuffix(last, " more problems") {
		t.Errorf("last error = %q", last)
	}
}
