package envoyhost

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
)

// defaultLogFormat is Envoy's default access log format.
const defaultLogFormat = `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" ` +
	`%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% ` +
	`%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" ` +
	`"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"` + "\n"

// accessLog is one of a connection manager's access logs.
type accessLog struct {
	mu     sync.Mutex
	w      io.Writer
	format []logPart
}

// logPart is one piece of a parsed format: literal text, or a command operator (op) with its
// argument and the longest output it may give (0: any).
type logPart struct {
	text, op, arg string
	max           int
}

// logOperators are the command operators the wazero host renders; any other renders "-".
var logOperators = map[string]bool{
	"START_TIME": true, "REQ": true, "RESP": true, "PROTOCOL": true, "RESPONSE_CODE": true,
	"RESPONSE_FLAGS": true, "BYTES_RECEIVED": true, "BYTES_SENT": true, "DURATION": true,
	"UPSTREAM_HOST": true, "UPSTREAM_CLUSTER": true, "ROUTE_NAME": true, "FILTER_STATE": true,
	"DOWNSTREAM_REMOTE_ADDRESS": true, "REQUEST_DURATION": true, "RESPONSE_DURATION": true,
}

// parseLogFormat parses an access log format string of Envoy's command operators: %OP%,
// %OP(ARG)% and either with a ":N" length limit; "%%" is a literal '%'. It returns the
// operators it does not render (they print "-") with the parts.
func parseLogFormat(format string) (parts []logPart, unknown []string, err error) {
	for format != "" {
		i := strings.IndexByte(format, '%')
		if i < 0 {
			parts = append(parts, logPart{text: format})
			break
		}
		if i > 0 {
			parts = append(parts, logPart{text: format[:i]})
		}
		rest := format[i+1:]
		if strings.HasPrefix(rest, "%") {
			parts = append(parts, logPart{text: "%"})
			format = rest[1:]
			continue
		}
		// The operator ends at the '%' after its argument's closing parenthesis, if any.
		end := strings.IndexByte(rest, '%')
		if open := strings.IndexByte(rest, '('); open >= 0 && (end < 0 || open < end) {
			closing := strings.IndexByte(rest[open:], ')')
			if closing < 0 {
				return nil, nil, fmt.Errorf("unterminated argument in %q", "%"+rest)
			}
			if e := strings.IndexByte(rest[open+closing:], '%'); e >= 0 {
				end = open + closing + e
			} else {
				end = -1
			}
		}
		if end < 0 {
			return nil, nil, fmt.Errorf("unterminated command operator %q", "%"+rest)
		}
		p, err := parseOperator(rest[:end])
		if err != nil {
			return nil, nil, err
		}
		if !logOperators[p.op] {
			unknown = append(unknown, p.op)
		}
		parts = append(parts, p)
		format = rest[end+1:]
	}
	return parts, unknown, nil
}

// parseOperator parses one command operator without its '%' signs: OP, OP(ARG), OP:N, OP(ARG):N.
func parseOperator(s string) (logPart, error) {
	p := logPart{}
	if i := strings.IndexByte(s, '('); i >= 0 {
		j := strings.LastIndexByte(s, ')')
		p.op, p.arg, s = s[:i], s[i+1:j], s[j+1:]
	} else if i := strings.IndexByte(s, ':'); i >= 0 {
		p.op, s = s[:i], s[i:]
	} else {
		p.op, s = s, ""
	}
	if s != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(s, ":"))
		if !strings.HasPrefix(s, ":") || err != nil || n <= 0 {
			return p, fmt.Errorf("command operator %s: %q is no length limit", p.op, s)
		}
		p.max = n
	}
	return p, nil
}

// openAccessLog opens where an access log goes: standard output or error, or a file (appended
// to, as Envoy does), with its format ("" for Envoy's default).
func openAccessLog(path, format string, opts Options) (*accessLog, []string, error) {
	if format == "" {
		format = defaultLogFormat
	}
	parts, unknown, err := parseLogFormat(format)
	if err != nil {
		return nil, nil, err
	}
	al := &accessLog{format: parts}
	switch path {
	case "/dev/stdout":
		al.w = os.Stdout
		if opts.Stdout != nil {
			al.w = opts.Stdout
		}
	case "/dev/stderr":
		al.w = os.Stderr
		if opts.Stderr != nil {
			al.w = opts.Stderr
		}
	default:
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, nil, err
		}
		al.w = f
	}
	return al, unknown, nil
}

// recorder remembers the status and size of a response for the access log.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
	wrote  bool
}

// WriteHeader records the status.
func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write records the body size.
func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

// Flush passes a flush through, for streamed responses.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// logEntry is what an access log line is rendered from.
type logEntry struct {
	start time.Time
	r     *http.Request
	rec   *recorder
	// res is what the filter and the router did (nil when the filter could not run the
	// stream, or before the route was served); route and cluster are the matched route's, and
	// upstream the address forwarded to (empty for a local or direct response).
	res            *wasmhost.Result
	route, cluster string
	upstream       string
}

// write logs one request in the log's format. Values the host does not track print as "-",
// Envoy's rendering of an absent value.
func (al *accessLog) write(e *logEntry) {
	var b strings.Builder
	for _, p := range al.format {
		if p.op == "" {
			b.WriteString(p.text)
			continue
		}
		v := e.value(p.op, p.arg)
		if v == "" {
			v = "-"
		}
		if p.max > 0 && len(v) > p.max {
			v = v[:p.max]
		}
		b.WriteString(v)
	}
	al.mu.Lock()
	defer al.mu.Unlock()
	_, _ = io.WriteString(al.w, b.String())
}

// value renders one command operator for the entry; "" when it has no value.
func (e *logEntry) value(op, arg string) string {
	switch op {
	case "START_TIME":
		return e.start.UTC().Format("2006-01-02T15:04:05.000Z")
	case "REQ":
		for _, name := range strings.Split(arg, "?") {
			if v := e.requestHeader(strings.ToLower(name)); v != "" {
				return v
			}
		}
	case "RESP":
		return e.rec.Header().Get(arg)
	case "PROTOCOL":
		return e.r.Proto
	case "RESPONSE_CODE":
		return strconv.Itoa(e.rec.status)
	case "BYTES_RECEIVED":
		return strconv.FormatInt(max(e.r.ContentLength, 0), 10)
	case "BYTES_SENT":
		return strconv.FormatInt(e.rec.bytes, 10)
	case "DURATION", "REQUEST_DURATION", "RESPONSE_DURATION":
		return strconv.FormatInt(time.Since(e.start).Milliseconds(), 10)
	case "UPSTREAM_HOST":
		return e.upstream
	case "UPSTREAM_CLUSTER":
		return e.cluster
	case "ROUTE_NAME":
		return e.route
	case "DOWNSTREAM_REMOTE_ADDRESS":
		return e.r.RemoteAddr
	case "FILTER_STATE":
		return e.filterState(arg)
	}
	return ""
}

// requestHeader returns a request header (lower case) as the filter left it, or as the client
// sent it when the filter did not run; pseudo-headers as Envoy names them.
func (e *logEntry) requestHeader(name string) string {
	if e.res != nil && e.res.RequestHeaders != nil {
		return e.res.RequestHeader(name)
	}
	switch name {
	case ":method":
		return e.r.Method
	case ":path":
		return e.r.RequestURI
	case ":authority":
		return e.r.Host
	}
	return e.r.Header.Get(name)
}

// filterState renders %FILTER_STATE(KEY:PLAIN)% (":PLAIN" or none): a Wasm filter's property
// is the filter-state object "wasm." + its path, whose plain serialisation is its value.
func (e *logEntry) filterState(arg string) string {
	key, _, _ := strings.Cut(arg, ":")
	path, ok := strings.CutPrefix(key, "wasm.")
	if !ok || e.res == nil {
		return ""
	}
	return string(e.res.FilterState[path])
}
