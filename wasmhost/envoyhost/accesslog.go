package envoyhost

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// accessLog is one of a connection manager's access logs.
type accessLog struct {
	mu sync.Mutex
	w  io.Writer
}

// openAccessLog opens where an access log goes: standard output or error, or a file (appended
// to, as Envoy does).
func openAccessLog(path string, opts Options) (*accessLog, error) {
	switch path {
	case "/dev/stdout":
		if opts.Stdout != nil {
			return &accessLog{w: opts.Stdout}, nil
		}
		return &accessLog{w: os.Stdout}, nil
	case "/dev/stderr":
		if opts.Stderr != nil {
			return &accessLog{w: opts.Stderr}, nil
		}
		return &accessLog{w: os.Stderr}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &accessLog{w: f}, nil
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

// write logs one request in Envoy's default access log format:
//
//	[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"
//	%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%
//	%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%"
//	"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"
//
// Response flags, the upstream service time and the upstream host are not tracked here and
// print as "-", Envoy's rendering of an absent value.
func (al *accessLog) write(start time.Time, r *http.Request, rec *recorder) {
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	received := r.ContentLength
	if received < 0 {
		received = 0
	}
	line := fmt.Sprintf("[%s] \"%s %s %s\" %d - %d %d %d - \"%s\" \"%s\" \"%s\" \"%s\" \"-\"\n",
		start.UTC().Format("2006-01-02T15:04:05.000Z"), r.Method, r.RequestURI, r.Proto,
		rec.status, received, rec.bytes, time.Since(start).Milliseconds(),
		dash(r.Header.Get("x-forwarded-for")), dash(r.Header.Get("user-agent")),
		dash(r.Header.Get("x-request-id")), dash(r.Host))
	al.mu.Lock()
	defer al.mu.Unlock()
	_, _ = io.WriteString(al.w, line)
}
