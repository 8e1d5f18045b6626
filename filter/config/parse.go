package config

import (
	"bytes"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-wasm/ratelimit/algorithms"
)

// Parse parses, validates and compiles a plugin configuration.
//
// On failure the error is an Errors value listing every problem found (up to 100), in
// document order, each as "path: message", for example
//
//	rules[2].window: "10" has no unit
//	rules[0].limt: unknown field (did you mean "limit"?)
//
// Errors for a field are not reported again as consequences elsewhere when that can be
// avoided, and no partially valid Config is ever returned.
func Parse(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes || !hasPrintableASCII(data) {
		if err := checkDocument(data); err != nil {
			return nil, err
		}
	}
	p := new(parser)
	root, jerr := decodeTree(data, p.duplicateKey)
	if jerr != nil {
		return nil, p.invalidJSON(jerr)
	}
	cfg := p.config(root)
	if err := p.result(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkDocument returns the problem of a document that is too large or only white space, or
// nil (out of line).
func checkDocument(data []byte) error {
	var p parser
	if len(data) > MaxConfigBytes {
		p.add("", "config is "+strconv.Itoa(len(data))+" bytes; the maximum is "+strconv.Itoa(MaxConfigBytes))
		return p.result()
	}
	if len(bytes.TrimSpace(data)) == 0 {
		p.add("", "config is empty: at least one rule is required")
		return p.result()
	}
	return nil
}

// duplicateKey reports a key that an object at path repeats (decodeTree calls it).
func (p *parser) duplicateKey(path, key string) {
	p.add(path, "duplicate key")
}

// invalidJSON returns the problems found so far with decodeTree's error last (out of line).
func (p *parser) invalidJSON(err *Error) error {
	p.add(err.Path, err.Msg)
	return p.result()
}

// hasPrintableASCII reports whether data holds a printable ASCII byte: such a config is not
// empty, and Parse need not compile bytes.TrimSpace in every VM's configure to know it.
func hasPrintableASCII(data []byte) bool {
	for _, c := range data {
		if c > ' ' && c < 0x7f {
			return true
		}
	}
	return false
}

// keyGroup returns the key group of the first of rules whose key is key, or group when none
// is.
func keyGroup(rules []*Rule, key []KeyPart, group int) int {
	for _, prev := range rules {
		if slices.Equal(prev.Key, key) {
			return prev.keyGroup
		}
	}
	return group
}

var topLevelFields = []string{
	"$schema", "domain", "failure_mode", "cas_attempts", "rate_limit_headers", "trusted_hops",
	"deny", "max_keys", "max_key_bytes", "redis", "rules", "enforce_percent", "near_limit_ratio", "filter_state",
}

func (p *parser) config(root *node) *Config {
	f, ok := p.object("", root, topLevelFields...)
	if !ok {
		return nil
	}
	c := &Config{
		Domain:           defaultDomain,
		FailureMode:      FailAllow,
		CASAttempts:      defaultCASAttempts,
		RateLimitHeaders: HeadersDraft,
		MaxKeys:          defaultMaxKeys,
		MaxKeyBytes:      defaultMaxKeyBytes,
		EnforcePercent:   100,
		NearLimitRatio:   DefaultNearLimitRatio,
	}
	c.Deny = defaultDeny()
	// A configuration of rules alone (the common one) skips the top-level options.
	if len(root.members) != 1 || root.members[0].key != "rules" {
		p.options(f, c)
	}
	n, path := f.get("rules")
	if n == nil {
		p.add("rules", "required: at least one rule")
		return c
	}
	elems, ok := p.array(path, n, 1, MaxRules)
	if !ok {
		return c
	}
	firstGlobal := -1
	for i, e := range elems {
		rpath := joinIndex(path, i)
		r := p.rule(rpath, e, c)
		if r == nil {
			continue
		}
		r.Index = i
		r.setEnforcement()
		if r.Name != "" && len(c.Rules) > 0 {
			p.checkName(rpath, r.Name, c.Rules)
		}
		if r.Scope == ScopeGlobal && firstGlobal < 0 {
			firstGlobal = i
		}
		r.setSourceKinds()
		r.keyGroup = i + 1
		if len(c.Rules) > 0 {
			r.keyGroup = keyGroup(c.Rules, r.Key, r.keyGroup)
		}
		c.Rules = append(c.Rules, r)
	}
	if firstGlobal >= 0 && !f.has("redis") {
		p.redisRequired(firstGlobal)
	}
	for _, r := range c.Rules {
		if r.ShadowRequestHeader != "" {
			p.shadowHeaderRead(path, r, c)
		}
	}
	p.budget(path, c)
	return c
}

// shadowHeaderRead refuses r's shadow_request_header when c reads that header: the filter
// removes it from every request (a client must not send it), so what reads it would never see
// it.
func (p *parser) shadowHeaderRead(path string, r *Rule, c *Config) {
	if by := c.readerOf(r.ShadowRequestHeader); by != "" {
		p.add(joinIndex(path, r.Index)+".shadow_request_header", strconv.Quote(r.ShadowRequestHeader)+
			" is read by "+by+", and the filter removes it from every request (a client must not send it)")
	}
}

// readerOf names the first place in c that reads request header h (a key part, a header
// condition, a cost header, trusted_hops' X-Forwarded-For, enforce_percent's x-request-id,
// the denial's content-type), or "" when none does.
func (c *Config) readerOf(h string) string {
	for _, r := range c.Rules {
		rpath := joinIndex("rules", r.Index)
		for j, kp := range r.Key {
			if kp.Source == SourceHeader && kp.Name == h {
				return joinIndex(rpath+".key", j)
			}
		}
		for j, m := range r.Match.Headers {
			if m.Name == h {
				return joinIndex(rpath+".match.headers", j)
			}
		}
		switch {
		case r.CostSpec.Header == h:
			return rpath + ".cost"
		case h == "x-request-id" && r.EnforcePPM < EnforceAll:
			return rpath + ".enforce_percent"
		}
	}
	switch {
	case h == "x-forwarded-for" && c.TrustedHops > 0:
		return "trusted_hops"
	case h == "content-type":
		return "the denial (it tells a gRPC request apart)"
	}
	return ""
}

// duplicateName reports the name of the rule at rpath that rules[prev]'s name prevName
// repeats, or reads the same as in a flat metric name (out of line).
func (p *parser) duplicateName(rpath, name string, prev int, prevName string) {
	if prevName == name {
		p.add(rpath+".name", "duplicate of rules["+strconv.Itoa(prev)+"].name "+strconv.Quote(name))
	} else {
		p.add(rpath+".name", strconv.Quote(name)+" and rules["+strconv.Itoa(prev)+"].name "+strconv.Quote(prevName)+
			" differ only in '.', '-' and '_', which Prometheus names cannot tell apart; rename one")
	}
}

// redisRequired reports the missing redis section that rules[first], a global rule, needs
// (out of line).
func (p *parser) redisRequired(first int) {
	p.add("redis", "required because rules["+strconv.Itoa(first)+`] has scope "global"`)
}

var headersModes = []string{string(HeadersDraft), string(HeadersLegacy), string(HeadersBoth), string(HeadersNone)}

// The fields of the configuration's objects, as the parser reads them (TestSchemaMatchesParser
// compares them with schema.json).
var (
	redisFields       = []string{"cluster", "authority", "timeout", "key_prefix", "partitions", "failure_mode", "breaker"}
	breakerFields     = []string{"failures", "cooldown"}
	adaptiveFields    = []string{"min_limit", "max_limit", "target_latency", "error_threshold", "interval"}
	costFields        = []string{"header", "default", "max"}
	keyPartFields     = []string{"source", "name", "value", "default", "ipv4_prefix", "ipv6_prefix", "on_duplicate"}
	matchFields       = []string{"routes", "virtual_hosts", "path", "methods", "headers"}
	pathMatchFields   = []string{"exact", "prefix", "regex"}
	headerMatchFields = []string{"name", "present", "exact", "prefix", "regex", "invert"}
	denyFields        = []string{"status", "body", "content_type", "headers", "envoy_ratelimited_header", "grpc_status"}
)

func (p *parser) redis(path string, n *node) *Redis {
	f, ok := p.object(path, n, redisFields...)
	if !ok {
		return nil
	}
	r := &Redis{
		Timeout:     defaultRedisTimeout,
		KeyPrefix:   defaultKeyPrefix,
		Partitions:  1,
		FailureMode: RedisFailLocal,
		Breaker:     Breaker{Failures: defaultBreakerFails, Cooldown: defaultCooldown},
	}
	if cn, cpath := f.get("cluster"); cn == nil {
		p.add(cpath, "required")
	} else {
		p.pattern(cpath, cn, 255, &r.Cluster, func(s string) bool { return isHostText(s, " \t") }, " is not a valid cluster name")
	}
	r.Authority = r.Cluster
	if an, apath := f.get("authority"); an != nil {
		p.pattern(apath, an, 255, &r.Authority, validAuthority, " is not a valid authority (want host or host:port, the port at most 65535)")
	}
	opt(f, "timeout", time.Millisecond, 10*time.Second, &r.Timeout, p.duration)
	// Braces let a Redis Cluster hash tag ("{rl}") pin every key to one slot, which the
	// multi-key scripts need. The prefix starts every key as it is written, so an empty tag
	// ("{}" at its first '{') would make Redis hash whole keys, descriptors included: each key
	// of one call on a slot of its own, chosen by the client.
	if kn, kpath := f.get("key_prefix"); kn != nil && p.pattern(kpath, kn, maxStringLen, &r.KeyPrefix,
		func(s string) bool { return len(s) <= 64 && onlyChars(s, "_.:{}-") }, " must match ^[A-Za-z0-9_.:{}-]{1,64}$") {
		if tag, closed := hashTag(r.KeyPrefix); closed && tag == "" {
			p.add(kpath, quote(r.KeyPrefix)+` starts an empty hash tag "{}", which makes Redis hash the whole key; put a name between the braces`)
		}
	}
	opt(f, "partitions", 1, 1024, &r.Partitions, p.intField)
	optEnum(p, f, "failure_mode", &r.FailureMode, "allow", "deny", "local")
	if bn, bpath := f.get("breaker"); bn != nil {
		if bf, ok := p.object(bpath, bn, breakerFields...); ok {
			opt(bf, "failures", 1, 1000, &r.Breaker.Failures, p.intField)
			opt(bf, "cooldown", 100*time.Millisecond, 10*time.Minute, &r.Breaker.Cooldown, p.duration)
		}
	}
	return r
}

// hashTag returns the hash tag of a key that starts with s, as Redis and twemproxy find it:
// what lies between the first '{' and the first '}' after it; closed is false when s holds no
// such pair (the tag, if any, then ends after s). An empty closed tag makes them hash the whole
// key rather than a tag.
func hashTag(s string) (tag string, closed bool) {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return "", false
	}
	tag, _, closed = strings.Cut(s[i+1:], "}")
	return tag, closed
}

// validAuthority reports whether s may be the callouts' :authority: host text, and a port after
// the last colon outside brackets (an IPv6 literal's) of at most 65535.
func validAuthority(s string) bool {
	i := strings.LastIndexByte(s, ':')
	return isHostText(s, " \t/?#@") && (i < 0 || strings.IndexByte(s[i:], ']') >= 0 || validPort(s[i+1:]))
}

// TaggedPrefix reports whether KeyPrefix holds a whole hash tag (a '{', then a '}' with
// something between): Redis Cluster and twemproxy then hash every key by it, so every key is
// on one slot whatever Partitions says.
func (r *Redis) TaggedPrefix() bool {
	tag, closed := hashTag(r.KeyPrefix)
	return closed && tag != ""
}

// isHostText reports whether s may name a cluster or authority: not empty, no control
// characters and none of bad.
func isHostText(s, bad string) bool {
	return s != "" && isFieldValue(s) && !strings.ContainsAny(s, bad)
}

var ruleFields = []string{
	"name", "description", "match", "key", "algorithm", "limit", "window", "burst", "variant",
	"cost", "shadow", "shadow_headers", "shadow_request_header", "overrides", "continue", "scope", "mode", "max_delay", "adaptive", "max_keys", "deny",
	"rate_limit_headers", "lease", "enforce_percent", "near_limit_ratio",
}

// options reads the top-level fields other than "rules" into c (out of line).
func (p *parser) options(f fields, c *Config) {
	if n, path := f.get("$schema"); n != nil {
		// Editors use "$schema" to find schema.json; the filter only checks its type.
		p.str(path, n, maxStringLen)
	}
	if n, path := f.get("domain"); n != nil {
		p.pattern(path, n, maxStringLen, &c.Domain, isName, nameMismatch)
	}
	optEnum(p, f, "failure_mode", &c.FailureMode, "allow", "deny")
	opt(f, "cas_attempts", 1, 64, &c.CASAttempts, p.intField)
	optEnum(p, f, "rate_limit_headers", &c.RateLimitHeaders, headersModes...)
	opt(f, "trusted_hops", 0, 16, &c.TrustedHops, p.intField)
	opt(f, "max_keys", 1, MaxKeysPerRule, &c.MaxKeys, p.intField)
	opt(f, "max_key_bytes", MinKeyBytes, MaxKeyBytes, &c.MaxKeyBytes, p.intField)
	p.deny(f, &c.Deny)
	if n, path := f.get("redis"); n != nil {
		c.Redis = p.redis(path, n)
	}
	opt(f, "enforce_percent", 0, 100, &c.EnforcePercent, p.float)
	opt(f, "near_limit_ratio", 0, 1, &c.NearLimitRatio, p.float)
	if n, path := f.get("filter_state"); n != nil {
		c.FilterState, _ = p.boolean(path, n)
	}
}

// algorithmNames lists the algorithms package algorithms describes (algorithms.Specs).
var algorithmNames = func() []string {
	var names []string
	for _, s := range algorithms.Specs() {
		names = append(names, s.Name)
	}
	return names
}()

// checkName reports the name of the rule at rpath when an earlier rule of rules has the same
// name, or one that reads the same in a flat metric name. Metric labels keep rule names apart,
// but a Prometheus that reads Envoy's stats without its tag extraction sees flat names, where
// '.', '-' and '_' are one character: two such names would share their metrics (out of line).
func (p *parser) checkName(rpath, name string, rules []*Rule) {
	for _, prev := range rules {
		if prev.Name != "" && SameRuleName(prev.Name, name) {
			p.duplicateName(rpath, name, prev.Index, prev.Name)
			return
		}
	}
}

// SameRuleName reports whether rule names a and b (ASCII, see isName) are the same once '.'
// and '-' become '_', as in a flat metric name: the names a configuration cannot hold both of.
func SameRuleName(a, b string) bool {
	flat := func(c byte) byte {
		if c == '.' || c == '-' {
			return '_'
		}
		return c
	}
	for i := 0; i < len(a) && len(a) == len(b); i++ {
		if flat(a[i]) != flat(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// ruleOptionFields are the rule's fields other than its name, key, continue and algorithm
// with its parameters. A rule that sets none of them, the common case, skips their readers.
var ruleOptionFields = []string{
	"description", "match", "cost", "shadow", "shadow_headers", "shadow_request_header",
	"max_keys", "rate_limit_headers", "deny", "overrides", "lease", "enforce_percent", "near_limit_ratio",
}

// algorithmOptionFields are the algorithm's parameters other than limit and window, which
// most rules do not set (see algorithm).
var algorithmOptionFields = []string{"burst", "variant", "mode", "max_delay", "scope", "adaptive"}

// hasAny reports whether object n has a member named in names.
func hasAny(n *node, names []string) bool {
	for _, m := range n.members {
		if slices.Contains(names, m.key) {
			return true
		}
	}
	return false
}

// rule parses one rule. It returns nil only when the rule is not an object; otherwise it
// returns the rule even with problems, so that later checks (duplicate names, redis) still
// run on what could be read. The optional fields (ruleOptionFields) are read out of line, only
// when the rule sets one of them, in one fixed order whichever fields are set.
func (p *parser) rule(path string, n *node, c *Config) *Rule {
	f, ok := p.object(path, n, ruleFields...)
	if !ok {
		return nil
	}
	r := &Rule{
		Scope:            ScopeLocal,
		Mode:             ModeMeter,
		CostSpec:         CostSpec{Constant: 1},
		MaxKeys:          c.MaxKeys,
		Deny:             c.Deny,
		RateLimitHeaders: c.RateLimitHeaders,
		EnforcePercent:   c.EnforcePercent,
		NearLimitRatio:   c.NearLimitRatio,
		trustedHops:      c.TrustedHops,
	}
	options := hasAny(n, ruleOptionFields)
	if nn, npath := f.get("name"); nn == nil {
		p.add(npath, "required")
	} else if s, ok := p.str(npath, nn, maxStringLen); ok {
		if isName(s) {
			r.Name = s
		} else {
			p.badName(npath, s)
		}
	}
	if options {
		p.ruleConditions(f, r)
	}
	if kn, kpath := f.get("key"); kn != nil {
		r.Key = p.key(kpath, kn)
	}
	if options {
		p.ruleCostShadow(f, r)
	}
	if bn, bpath := f.get("continue"); bn != nil {
		r.Continue, _ = p.boolean(bpath, bn)
	}
	if options {
		p.ruleResponse(f, r)
	}
	p.algorithm(path, f, r)
	if options {
		p.ruleAttachments(f, r)
	}
	return r
}

// nameMismatch is the message for an invalid rule name or domain, after the name.
const nameMismatch = " must match ^[A-Za-z0-9_.-]{1,64}$"

// badName reports s, at path, as no valid name (out of line).
func (p *parser) badName(path, s string) {
	p.add(path, quote(s)+nameMismatch)
}

// ruleConditions reads the rule's description and match into r (see rule).
func (p *parser) ruleConditions(f fields, r *Rule) {
	if dn, dpath := f.get("description"); dn != nil {
		r.Description, _ = p.str(dpath, dn, maxStringLen)
	}
	if mn, mpath := f.get("match"); mn != nil {
		p.match(mpath, mn, &r.Match)
	}
}

// ruleCostShadow reads the rule's cost and shadow options into r (see rule).
func (p *parser) ruleCostShadow(f fields, r *Rule) {
	if cn, cpath := f.get("cost"); cn != nil {
		if cs, ok := p.cost(cpath, cn); ok {
			r.CostSpec = cs
		}
	}
	if bn, bpath := f.get("shadow"); bn != nil {
		r.Shadow, _ = p.boolean(bpath, bn)
	}
	if f.has("enforce_percent") || f.has("near_limit_ratio") {
		p.enforcement(f, r)
	}
	if f.has("shadow_headers") || f.has("shadow_request_header") {
		p.shadowOptions(f, r)
	}
}

// ruleResponse reads the rule's max_keys, rate_limit_headers and deny into r (see rule).
func (p *parser) ruleResponse(f fields, r *Rule) {
	opt(f, "max_keys", 1, MaxKeysPerRule, &r.MaxKeys, p.intField)
	optEnum(p, f, "rate_limit_headers", &r.RateLimitHeaders, headersModes...)
	p.deny(f, &r.Deny)
}

// ruleAttachments reads the rule's overrides and lease into r, after its algorithm, which
// both need (see rule).
func (p *parser) ruleAttachments(f fields, r *Rule) {
	if on, opath := f.get("overrides"); on != nil {
		p.overrides(opath, on, r)
	}
	if ln, lpath := f.get("lease"); ln != nil {
		r.Lease = p.lease(lpath, ln, r)
	}
}

// algorithm reads the algorithm and its parameters into r.Algorithm, checks what the config
// itself owns (types, units, which fields go with which algorithm and mode), and then lets
// package algorithms validate the parameters and build the limiter (see checkAlgorithm).
func (p *parser) algorithm(path string, f fields, r *Rule) {
	an, apath := f.get("algorithm")
	if an == nil {
		p.add(apath, "required")
		return
	}
	alg, ok := p.enum(apath, an, algorithmNames...)
	if !ok {
		return
	}
	ac := &r.Algorithm
	ac.Algorithm = alg
	// Which optional fields go with which algorithm is package algorithms' to say, once.
	spec, _ := algorithms.SpecOf(alg)
	valid := true // false once a parameter is bad, so that algorithms.New does not pile on
	// The fields most rules do not set are read out of line, only when set.
	options := hasAny(f.n, algorithmOptionFields)
	if wn, wpath := f.get("window"); wn == nil {
		p.add(wpath, "required")
		valid = false
	} else if d, ok := p.duration(wpath, wn, algorithms.MinWindow, algorithms.MaxWindow); ok {
		ac.Window = d
	} else {
		valid = false
	}

	if options {
		if !p.algorithmOptions(f, r, spec) {
			valid = false
		}
	} else if spec.Accepts(algorithms.FieldVariant) {
		p.variant(f, ac) // the default variant: without the field it cannot fail
	}

	// The limit is read before the adaptive section so that its type is checked even when
	// the adaptive section is broken.
	ln, lpath := f.get("limit")
	var limit int64
	if ln != nil {
		if v, ok := p.integer(lpath, ln, 1, algorithms.LimitCeiling); ok {
			limit = v
		} else {
			valid = false
		}
	}
	if spec.Accepts(algorithms.FieldAdaptive) {
		if !p.adaptiveLimit(f, ac, lpath, limit) {
			return
		}
	} else {
		if options && p.notFor(f, "adaptive", alg) {
			valid = false
		}
		if ln == nil {
			p.add(lpath, "required")
			valid = false
		}
		ac.Limit = limit
	}

	if valid {
		if fpath, msg := checkAlgorithm(r); msg != "" {
			p.addAt(path, fpath, msg)
		}
	}
}

// addAt records a problem at path's relative path fpath, such as "adaptive.interval".
func (p *parser) addAt(path, fpath, msg string) {
	p.add(path+"."+fpath, msg)
}

// algorithmOptions reads the algorithm's burst, variant, mode, max_delay and scope into r,
// and reports whether they are valid (out of line).
func (p *parser) algorithmOptions(f fields, r *Rule, spec algorithms.Spec) bool {
	ac := &r.Algorithm
	alg := ac.Algorithm
	valid := true
	if spec.Accepts(algorithms.FieldBurst) {
		valid = opt(f, "burst", 1, algorithms.LimitCeiling, &ac.Burst, p.integer)
	} else if p.notFor(f, "burst", alg) {
		valid = false
	}

	if spec.Accepts(algorithms.FieldVariant) {
		if !p.variant(f, ac) {
			valid = false
		}
	} else if p.notFor(f, "variant", alg) {
		valid = false
	}

	if f.has("mode") || f.has("max_delay") {
		if !p.mode(f, r, spec) {
			valid = false
		}
	}

	if sn, spath := f.get("scope"); sn != nil {
		p.scope(spath, sn, r, spec)
	}
	return valid
}

// notFor reports the field when it is set, as not used by why (an algorithm, a mode, a key
// source), and whether it was set: accepting and ignoring it would let a config look like it
// says something it does not.
func (p *parser) notFor(f fields, field, why string) bool {
	fn, fpath := f.get(field)
	if fn == nil {
		return false
	}
	p.add(fpath, "not used by "+why)
	return true
}

// variant reads the sliding window's variant into ac, and reports whether it is valid.
func (p *parser) variant(f fields, ac *algorithms.Config) bool {
	ac.Variant = algorithms.VariantCounter
	return optEnum(p, f, "variant", &ac.Variant, algorithms.VariantCounter, algorithms.VariantLog)
}

// mode reads the rule's mode and, for a shaping rule, max_delay into r, and reports whether
// they are valid (called when either is set; without them the rule meters).
func (p *parser) mode(f fields, r *Rule, spec algorithms.Spec) bool {
	valid := true
	ac := &r.Algorithm
	if mn, mpath := f.get("mode"); mn != nil {
		if m, ok := p.enum(mpath, mn, "meter", "shape"); ok {
			r.Mode = Mode(m)
			if r.Mode == ModeShape && !spec.Accepts(algorithms.FieldMaxDelay) {
				p.add(mpath, `"shape" needs algorithm leaky_bucket`)
				valid = false
			}
		} else {
			valid = false
		}
	}
	if r.Mode == ModeShape {
		// A non-zero MaxDelay is what turns the leaky bucket into a shaper.
		valid = need(p, f, "max_delay", ` when mode is "shape"`, time.Millisecond, maxShapingDelay, &ac.MaxDelay, p.duration) && valid
	} else if p.notFor(f, "max_delay", `mode "meter" (max_delay needs mode "shape")`) {
		valid = false
	}
	return valid
}

// scope reads the rule's scope, at path, into r.
func (p *parser) scope(path string, n *node, r *Rule, spec algorithms.Spec) {
	if s, ok := p.enum(path, n, "local", "global"); ok {
		r.Scope = Scope(s)
		switch {
		case r.Scope == ScopeGlobal && !spec.Global:
			p.add(path, `"global" is not supported by adaptive: it tunes the limit from each proxy's own latency and errors`)
		case r.Scope == ScopeGlobal && r.Mode == ModeShape:
			p.add(path, `"global" is not supported with mode "shape": a delay cannot be scheduled across proxies`)
		}
	}
}

// adaptiveLimit reads an adaptive rule's adaptive section into ac and sets its starting limit
// (limit, read from lpath, when set). It reports false when the rule cannot be checked
// further.
func (p *parser) adaptiveLimit(f fields, ac *algorithms.Config, lpath string, limit int64) bool {
	an, apath := f.get("adaptive")
	if an == nil {
		p.add(apath, "required for algorithm adaptive")
		return false
	}
	if !p.adaptive(apath, an, ac) {
		return false
	}
	ac.Limit = ac.MaxLimit // the default starting limit: no shedding until signals say so
	if limit > 0 {
		if limit < ac.MinLimit || limit > ac.MaxLimit {
			p.add(lpath, "must be between adaptive.min_limit ("+strconv.FormatInt(ac.MinLimit, 10)+") and adaptive.max_limit ("+strconv.FormatInt(ac.MaxLimit, 10)+"), got "+strconv.FormatInt(limit, 10))
			return false
		}
		ac.Limit = limit
	}
	return true
}

// adaptive reads the adaptive section into ac.
func (p *parser) adaptive(path string, n *node, ac *algorithms.Config) bool {
	f, ok := p.object(path, n, adaptiveFields...)
	if !ok {
		return false
	}
	ac.ErrorThreshold = defaultErrorThreshold
	ac.AdjustInterval = defaultAdaptiveInterval
	valid := need(p, f, "min_limit", "", 1, algorithms.LimitCeiling, &ac.MinLimit, p.integer)
	valid = need(p, f, "max_limit", "", 1, algorithms.LimitCeiling, &ac.MaxLimit, p.integer) && valid
	valid = opt(f, "target_latency", time.Millisecond, 60*time.Second, &ac.TargetLatency, p.duration) && valid
	valid = opt(f, "error_threshold", 0, 1, &ac.ErrorThreshold, p.float) && valid
	valid = opt(f, "interval", 100*time.Millisecond, time.Hour, &ac.AdjustInterval, p.duration) && valid
	if valid && ac.MinLimit > ac.MaxLimit {
		p.add(joinKey(path, "min_limit"), "must be <= max_limit ("+strconv.FormatInt(ac.MaxLimit, 10)+"), got "+strconv.FormatInt(ac.MinLimit, 10))
		valid = false
	}
	if valid && ac.TargetLatency == 0 && ac.ErrorThreshold == 0 {
		p.add(path, "needs target_latency or a non-zero error_threshold: with neither signal the limit never moves")
		valid = false
	}
	return valid
}

// cost reads either an integer or {header, default, max}.
func (p *parser) cost(path string, n *node) (CostSpec, bool) {
	if n.kind == kindNumber {
		v, ok := p.integer(path, n, 1, maxCost)
		return CostSpec{Constant: v}, ok
	}
	if n.kind != kindObject {
		p.add(path, "want an integer or an object {header, default, max} or {reserve, usage, max, on_missing}, got "+n.describe())
		return CostSpec{}, false
	}
	if n.lookup("reserve") != nil || n.lookup("usage") != nil { // a usage cost, not a cost header
		return p.usageCost(path, n)
	}
	f, _ := p.object(path, n, costFields...)
	cs := CostSpec{Constant: 1, Default: 1}
	valid := true
	if hn, hpath := f.get("header"); hn == nil {
		p.add(hpath, "required")
		valid = false
	} else if h, ok := p.headerName(hpath, hn); ok {
		cs.Header = h
	} else {
		valid = false
	}
	valid = need(p, f, "max", ": it bounds what one request can cost and is charged for invalid values", 1, maxCost, &cs.Max, p.integer) && valid
	if !opt(f, "default", 1, maxCost, &cs.Default, p.integer) {
		valid = false
	} else if cs.Max > 0 && cs.Default > cs.Max { // not the default 1: max is at least 1
		p.add(joinKey(path, "default"), "must be <= max ("+strconv.FormatInt(cs.Max, 10)+"), got "+strconv.FormatInt(cs.Default, 10))
		valid = false
	}
	return cs, valid
}

// keySources lists the key sources in the order of their kinds (see kindOf).
var keySources = []string{
	string(SourceClientIP), string(SourceHeader), string(SourceQuery), string(SourcePath),
	string(SourceMethod), string(SourceRoute), string(SourceConst),
}

// constValue reads the value of a key part of source "const" into kp, and reports whether it
// is valid; a const part has no default (out of line).
func (p *parser) constValue(f fields, kp *KeyPart) bool {
	vn, vpath := f.get("value")
	valid := vn != nil
	if !valid {
		p.add(vpath, `required for source "const"`)
	} else {
		kp.Value, valid = p.str(vpath, vn, maxStringLen)
	}
	return !p.notFor(f, "default", `source "const": a constant is never missing`) && valid
}

// requiredFor reports the missing name of a key part of source s at path (out of line).
func (p *parser) requiredFor(path, s string) {
	p.add(path, "required for source "+strconv.Quote(s))
}

// queryName reads the name of a query parameter, at path, which must not be empty.
func (p *parser) queryName(path string, n *node) (string, bool) {
	name, ok := p.str(path, n, 256)
	if ok && name == "" {
		p.add(path, "must not be empty")
		ok = false
	}
	return name, ok
}

// unusedBy is notFor for a key part's field that source s does not read.
func (p *parser) unusedBy(f fields, field, s string) bool {
	return p.notFor(f, field, "source "+strconv.Quote(s))
}

// The fields a key part of each source reads (see keyPartUses).
var (
	clientIPPartFields = []string{"source", "default", "ipv4_prefix", "ipv6_prefix"}
	namedPartFields    = []string{"source", "name", "default", "on_duplicate"}
	constPartFields    = []string{"source", "value"}
	otherPartFields    = []string{"source", "default"}
)

// keyPartUses returns the fields that keyPart reads for a key part of source kind k
// (TestKeyPartUses).
func keyPartUses(k sourceKind) []string {
	switch k {
	case kindClientIP:
		return clientIPPartFields
	case kindHeader, kindQuery:
		return namedPartFields
	case kindConst:
		return constPartFields
	}
	return otherPartFields
}

// onlyMembers reports whether every member of object n is named in names.
func onlyMembers(n *node, names []string) bool {
	for _, m := range n.members {
		if !slices.Contains(names, m.key) {
			return false
		}
	}
	return true
}

func (p *parser) key(path string, n *node) []KeyPart {
	elems, ok := p.array(path, n, 0, MaxKeyParts)
	if !ok {
		return nil
	}
	parts := make([]KeyPart, 0, len(elems))
	for i, e := range elems {
		if kp, ok := p.keyPart(joinIndex(path, i), e); ok {
			parts = append(parts, kp)
		}
	}
	return parts
}

func (p *parser) keyPart(path string, n *node) (KeyPart, bool) {
	f, ok := p.object(path, n, keyPartFields...)
	if !ok {
		return KeyPart{}, false
	}
	kp := KeyPart{IPv4Prefix: 32, IPv6Prefix: 128}
	sn, spath := f.get("source")
	if sn == nil {
		p.add(spath, "required")
		return kp, false
	}
	s, ok := p.enum(spath, sn, keySources...)
	if !ok {
		return kp, false
	}
	kp.Source = Source(s)
	valid := true
	// The branches below switch on the source's kind, an integer: each string comparison is a
	// call in the Wasm module. A key part that sets only fields its source reads (the common
	// case) skips the checks for the others.
	kind := kindOf(kp.Source)
	strict := !onlyMembers(n, keyPartUses(kind))
	named := kind == kindHeader || kind == kindQuery

	if named {
		nn, npath := f.get("name")
		if nn == nil {
			p.requiredFor(npath, s)
			valid = false
		} else if kind == kindHeader {
			kp.Name, ok = p.headerName(npath, nn)
			valid = valid && ok
		} else {
			kp.Name, ok = p.queryName(npath, nn)
			valid = valid && ok
		}
	}

	if kind == kindConst {
		if !p.constValue(f, &kp) {
			valid = false
		}
	} else {
		if dn, dpath := f.get("default"); dn != nil {
			if d, ok := p.str(dpath, dn, maxStringLen); ok {
				kp.Default, kp.HasDefault = d, true
			} else {
				valid = false
			}
		}
	}

	if named {
		kp.OnDuplicate = DuplicateReject
		if dn, dpath := f.get("on_duplicate"); dn != nil {
			d, ok := p.enum(dpath, dn, duplicates...)
			kp.OnDuplicate, valid = Duplicate(d), valid && ok
		}
	}

	if kind == kindClientIP {
		if pn, ppath := f.get("ipv4_prefix"); pn != nil {
			kp.IPv4Prefix, ok = p.intField(ppath, pn, 1, 32)
			valid = valid && ok
		}
		if pn, ppath := f.get("ipv6_prefix"); pn != nil {
			kp.IPv6Prefix, ok = p.intField(ppath, pn, 1, 128)
			valid = valid && ok
		}
	}
	if strict {
		for _, field := range []string{"name", "value", "on_duplicate", "ipv4_prefix", "ipv6_prefix"} {
			if !slices.Contains(keyPartUses(kind), field) && p.unusedBy(f, field, s) {
				valid = false
			}
		}
	}
	return kp, valid
}

// match reads the rule's request conditions into m.
func (p *parser) match(path string, n *node, m *Match) {
	f, ok := p.object(path, n, matchFields...)
	if !ok {
		return
	}
	if ln, lpath := f.get("routes"); ln != nil {
		m.Routes = p.stringList(lpath, ln, MaxListLen, "routes")
		m.routes = newStringSet(m.Routes)
	}
	if ln, lpath := f.get("virtual_hosts"); ln != nil {
		m.VirtualHosts = p.stringList(lpath, ln, MaxListLen, "virtual hosts")
		m.vhosts = newStringSet(m.VirtualHosts)
	}
	if pn, ppath := f.get("path"); pn != nil {
		m.Path = p.pathMatch(ppath, pn)
	}
	if ln, lpath := f.get("methods"); ln != nil {
		methods := p.stringList(lpath, ln, MaxMethods, "methods")
		for i, s := range methods {
			if !isToken(s) || strings.ToUpper(s) != s {
				p.add(joinIndex(lpath, i), quote(s)+" is not an upper-case method token (like GET)")
			}
		}
		m.Methods = methods
		m.methods = newStringSet(methods)
	}
	if hn, hpath := f.get("headers"); hn != nil {
		elems, _ := p.array(hpath, hn, 1, MaxHeaderConds)
		for i, e := range elems {
			if hm, ok := p.headerMatch(joinIndex(hpath, i), e); ok {
				m.Headers = append(m.Headers, hm)
			}
		}
	}
}

// stringList reads a non-empty list of strings. An empty list is an error rather than
// "matches nothing" or "matches everything": either reading would surprise someone.
func (p *parser) stringList(path string, n *node, max int, what string) []string {
	elems, ok := p.array(path, n, 0, max)
	if !ok {
		return nil
	}
	if len(elems) == 0 {
		p.add(path, "must not be empty (omit it to match all "+what+")")
		return nil
	}
	out := make([]string, 0, len(elems))
	for i, e := range elems {
		if s, ok := p.str(joinIndex(path, i), e, maxStringLen); ok {
			out = append(out, s)
		}
	}
	return out
}

// compileRegex compiles an RE2 expression anchored at both ends, so that it must match the
// whole value: an unanchored "/admin" would also match "/public/admin-docs".
func (p *parser) compileRegex(path, src string) (*regexp.Regexp, bool) {
	if len(src) > maxRegexLen {
		p.tooLong(path, len(src), maxRegexLen)
		return nil, false
	}
	// Parse the source alone first so that a syntax error quotes what the user wrote, not our
	// anchoring wrapper; the program's size is checked before anything is compiled.
	if _, err := syntax.Parse(src, syntax.Perl); err != nil {
		p.add(path, err.Error())
		return nil, false
	}
	anchored := `^(?:` + src + `)$`
	if !p.checkRegexProgram(path, anchored) {
		return nil, false
	}
	re, err := regexp.Compile(anchored)
	if err != nil {
		p.add(path, err.Error())
		return nil, false
	}
	return re, true
}

// onlyOne finds which one of the given fields an object sets, reporting none or several; it
// returns the field's index in names.
func (p *parser) onlyOne(path string, f fields, names ...string) (int, *node, string, bool) {
	var set []string
	which := 0
	for i, name := range names {
		if f.has(name) {
			set = append(set, name)
			which = i
		}
	}
	if len(set) != 1 {
		msg := "want exactly one of " + strings.Join(names, ", ")
		if len(set) > 1 {
			msg += ", got " + strings.Join(set, " and ")
		}
		p.add(path, msg)
		return 0, nil, "", false
	}
	n, npath := f.get(names[which])
	return which, n, npath, true
}

// condition reads the value of a path or header condition of kind, a regular expression
// compiled.
func (p *parser) condition(path string, n *node, kind StringMatchKind) (string, *regexp.Regexp, bool) {
	s, ok := p.str(path, n, maxStringLen)
	if !ok || kind != MatchRegex {
		return s, nil, ok
	}
	re, ok := p.compileRegex(path, s)
	return s, re, ok
}

func (p *parser) pathMatch(path string, n *node) *PathMatch {
	f, ok := p.object(path, n, pathMatchFields...)
	if !ok {
		return nil
	}
	which, vn, vpath, ok := p.onlyOne(path, f, "exact", "prefix", "regex")
	if !ok {
		return nil
	}
	pm := &PathMatch{Kind: MatchExact + StringMatchKind(which)}
	pm.Value, pm.re, ok = p.condition(vpath, vn, pm.Kind)
	switch s := pm.Value; {
	case !ok:
		return nil
	case pm.Kind == MatchRegex:
	case !strings.HasPrefix(s, "/"):
		p.add(vpath, quote(s)+` must start with "/"`)
		return nil
	case strings.ContainsAny(s, "?#"):
		p.add(vpath, quote(s)+" must not contain a query string: paths are matched without it")
		return nil
	}
	return pm
}

func (p *parser) headerMatch(path string, n *node) (HeaderMatch, bool) {
	f, ok := p.object(path, n, headerMatchFields...)
	if !ok {
		return HeaderMatch{}, false
	}
	var hm HeaderMatch
	valid := true
	if nn, npath := f.get("name"); nn == nil {
		p.add(npath, "required")
		valid = false
	} else if hm.Name, ok = p.headerName(npath, nn); !ok {
		valid = false
	}
	if in, ipath := f.get("invert"); in != nil {
		hm.Invert, ok = p.boolean(ipath, in)
		valid = valid && ok
	}
	which, vn, vpath, ok := p.onlyOne(path, f, "present", "exact", "prefix", "regex")
	if !ok {
		return hm, false
	}
	if which == 0 {
		present, ok := p.boolean(vpath, vn)
		hm.Kind = MatchAbsent
		if present {
			hm.Kind = MatchPresent
		}
		return hm, valid && ok
	}
	hm.Kind = MatchExact + StringMatchKind(which-1)
	hm.Value, hm.re, ok = p.condition(vpath, vn, hm.Kind)
	if ok && hm.Kind == MatchPrefix && hm.Value == "" {
		p.add(vpath, `must not be empty (use "present": true)`)
		ok = false
	}
	return hm, valid && ok
}

// defaultDeny is the built-in denial response.
func defaultDeny() *Deny {
	d := &Deny{Status: defaultDenyStatus, Body: defaultDenyBody, ContentType: "application/json",
		EnvoyRateLimited: true, GrpcStatus: grpcResourceExhausted}
	d.body = defaultBody[:]
	return d
}

// defaultBody is defaultDenyBody compiled, as compileBody compiles it
// (TestDefaultBodyIsCompiled), written out and statically initialised so that a configuration
// without a deny body of its own does not run compileBody (see filter/doc.go).
var defaultBody = [...]bodyPart{
	{lit: `{"error":"rate_limited","rule":"`}, {ph: phRule}, {lit: `","retry_after":`}, {ph: phRetryAfter}, {lit: `}`},
}

// reservedDenyHeader says why a denial header is reserved: these are set by the filter
// itself, and letting the config set them too would send duplicates or contradict the
// computed values. (A switch, not a map, for the reason durationUnit gives.)
func reservedDenyHeader(name string) (string, bool) {
	switch name {
	case "content-type":
		return `use "content_type"`, true
	case "content-length":
		return "computed from the body", true
	case "retry-after", "ratelimit", "ratelimit-policy", "x-ratelimit-limit",
		"x-ratelimit-remaining", "x-ratelimit-reset":
		return "set by the filter", true
	case "x-envoy-ratelimited":
		return `set by the filter; see "envoy_ratelimited_header"`, true
	case "grpc-status", "grpc-message":
		return `set by Envoy for a gRPC request; see "grpc_status"`, true
	}
	return "", false
}

// deny reads the denial response of f's "deny" member, when set and valid, into *dst. Absent
// fields are inherited from *dst (the top-level response, or the built-in one), except that a
// body given without a content_type gets "text/plain": the inherited content type described
// a different body. A rule's headers, when given, replace the parent's entirely, so a rule
// can drop them.
func (p *parser) deny(of fields, dst **Deny) {
	n, path := of.get("deny")
	if n == nil {
		return
	}
	f, ok := p.object(path, n, denyFields...)
	if !ok {
		return
	}
	d := **dst
	valid := opt(f, "status", 400, 599, &d.Status, p.intField)
	if bn, bpath := f.get("body"); bn != nil {
		s, ok := p.str(bpath, bn, maxBodyLen)
		parts, msg := compileBody(s)
		switch {
		case !ok:
			valid = false
		case msg != "":
			p.add(bpath, msg)
			valid = false
		default:
			d.Body, d.body, d.ContentType = s, parts, "text/plain"
		}
	}
	if cn, cpath := f.get("content_type"); cn != nil {
		valid = p.pattern(cpath, cn, 256, &d.ContentType, func(s string) bool { return isHostText(s, "") }, " is not a valid content type") && valid
	}
	if bn, bpath := f.get("envoy_ratelimited_header"); bn != nil {
		d.EnvoyRateLimited, ok = p.boolean(bpath, bn)
		valid = valid && ok
	}
	if gn, gpath := f.get("grpc_status"); gn != nil {
		if v, ok := p.intField(gpath, gn, 0, 16); !ok {
			valid = false
		} else if v != grpcResourceExhausted && v != grpcUnavailable {
			p.add(gpath, strconv.Itoa(v)+" is not allowed; use 8 (RESOURCE_EXHAUSTED) or 14 (UNAVAILABLE)")
			valid = false
		} else {
			d.GrpcStatus = v
		}
	}
	if hn, hpath := f.get("headers"); hn != nil {
		if hn.kind != kindObject {
			p.add(hpath, "want an object of header names to values, got "+hn.describe())
			valid = false
		} else if len(hn.members) > maxDenyHeaders {
			p.add(hpath, "has "+strconv.Itoa(len(hn.members))+" headers; the maximum is "+strconv.Itoa(maxDenyHeaders))
			valid = false
		} else {
			d.Headers = nil
			seen := map[string]string{}
			for _, m := range hn.members {
				mpath, name := joinKey(hpath, m.key), strings.ToLower(m.key)
				why, reserved := reservedDenyHeader(name)
				prev, dup := seen[name]
				switch {
				case !isToken(m.key): // before lower-casing, as in headerName
					p.badHeaderName(mpath, m.key)
				case reserved:
					p.add(mpath, "cannot be set here: "+why)
				case dup:
					p.add(mpath, "duplicate of header "+strconv.Quote(prev)+" (header names are case-insensitive)")
				default:
					seen[name] = m.key
					var v string
					if p.pattern(mpath, m.val, maxStringLen, &v, isFieldValue, " contains control characters") {
						d.Headers = append(d.Headers, Header{Name: name, Value: v})
						continue
					}
				}
				valid = false
			}
			slices.SortStableFunc(d.Headers, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
		}
	}
	if valid {
		*dst = &d
	}
}

// The gRPC status codes a denial may carry (grpc/grpc doc/statuscodes.md).
const (
	grpcResourceExhausted = 8
	grpcUnavailable       = 14
)

// enforcement reads the rule's enforce_percent and near_limit_ratio into r, after its shadow
// flag: a shadow rule enforces nothing, so a share of enforcement is an error there.
func (p *parser) enforcement(f fields, r *Rule) {
	if n, path := f.get("enforce_percent"); n != nil {
		if v, ok := p.float(path, n, 0, 100); ok {
			r.EnforcePercent = v
		}
		if r.Shadow {
			p.add(path, `not allowed with "shadow": true, which enforces no denial`)
		}
	}
	opt(f, "near_limit_ratio", 0, 1, &r.NearLimitRatio, p.float)
}

// shadowOptions reads the fields of rules that let denials through: whether a shadow rule's
// rate-limit headers reach clients, and the request header that tells the upstream of a
// would-be denial (a shadow rule's, or one an enforce_percent below 100 did not enforce). On a
// rule that enforces every denial they would mean nothing, so they are errors there rather
// than ignored.
func (p *parser) shadowOptions(f fields, r *Rule) {
	if bn, bpath := f.get("shadow_headers"); bn != nil {
		r.ShadowHeaders, _ = p.boolean(bpath, bn)
		if !r.Shadow {
			p.add(bpath, `only allowed with "shadow": true`)
		}
	}
	if hn, hpath := f.get("shadow_request_header"); hn != nil {
		s, ok := p.str(hpath, hn, 256)
		switch {
		case !ok:
		case !r.Shadow && r.EnforcePercent == 100:
			p.add(hpath, `only allowed with "shadow": true or an enforce_percent below 100`)
		case !isToken(s) || strings.HasPrefix(s, ":"):
			p.badHeaderName(hpath, s)
		default:
			r.ShadowRequestHeader = strings.ToLower(s)
		}
	}
}
