package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeRequest implements Request over plain fields. Header names are stored lower-case,
// like Envoy's header map; repeated lines are joined by "," for Header, as the filter does,
// and kept apart in lines for HeaderLines.
type fakeRequest struct {
	headers map[string]string
	lines   map[string][]string
	method  string
	path    string
	route   string
	vhost   string
	source  string
}

func (r *fakeRequest) Header(name string) (string, bool) {
	v, ok := r.headers[name]
	return v, ok
}

// HeaderLines returns the lines req recorded; a header set directly in headers is one line.
func (r *fakeRequest) HeaderLines(name string) (first, last string, n int) {
	if l := r.lines[name]; len(l) > 0 {
		return l[0], l[len(l)-1], len(l)
	}
	if v, ok := r.headers[name]; ok {
		return v, v, 1
	}
	return "", "", 0
}
func (r *fakeRequest) Method() string        { return r.method }
func (r *fakeRequest) Path() string          { return r.path }
func (r *fakeRequest) Route() string         { return r.route }
func (r *fakeRequest) VirtualHost() string   { return r.vhost }
func (r *fakeRequest) SourceAddress() string { return r.source }

// ClientIPCache returns nil: tests change a request's fields between calls.
func (r *fakeRequest) ClientIPCache() *ClientIPCache { return nil }

// req builds a request: GET / from 192.0.2.1:1234 on route "api", plus headers given as
// "name: value" strings (repeated names are joined with ",").
func req(headers ...string) *fakeRequest {
	r := &fakeRequest{
		headers: map[string]string{},
		lines:   map[string][]string{},
		method:  "GET",
		path:    "/",
		route:   "api",
		vhost:   "example.com",
		source:  "192.0.2.1:1234",
	}
	for _, h := range headers {
		name, value, _ := strings.Cut(h, ":")
		name = strings.ToLower(strings.TrimSpace(name))
		value = strings.TrimSpace(value)
		r.lines[name] = append(r.lines[name], value)
		if prev, ok := r.headers[name]; ok {
			value = prev + "," + value
		}
		r.headers[name] = value
	}
	return r
}

func (r *fakeRequest) with(f func(*fakeRequest)) *fakeRequest {
	f(r)
	return r
}

// mustParse parses a config that the test expects to be valid.
func mustParse(t testing.TB, js string) *Config {
	t.Helper()
	c, err := Parse([]byte(js))
	if err != nil {
		t.Fatalf("Parse: %v\nconfig: %s", err, js)
	}
	return c
}

// oneRule wraps rule fields in a config with a single rule named "r".
func oneRule(fields string) string {
	return `{"rules":[{"name":"r",` + fields + `}]}`
}

const tb = `"algorithm":"token_bucket","limit":10,"window":"1s"`

// durationOf parses s as the config does, with the problem as an error.
func durationOf(s string) (time.Duration, error) {
	d, msg := parseDuration(s)
	if msg != "" {
		return 0, errors.New(msg)
	}
	return d, nil
}
