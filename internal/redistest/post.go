package redistest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ratelimit-wasm/ratelimit/sharedstate/redis"
)

// Post sends body to the webdis at url (such as Server.WebdisURL) the way the filter's callouts
// do: the method, path and content type of package redis, the body as the command, keep-alive. It returns the
// answer's status and body. It is safe for concurrent use.
//
// Tests that relay the filter's callouts or drive the scripts make tens of thousands of calls,
// so Post keeps idle connections per address and writes each request and reads its answer on
// the calling goroutine (net/http's ReadResponse): a call costs the test two system calls and
// no goroutine hand-off, where net/http's client hands each call to two goroutines of its own.
func Post(url string, body []byte) (status int, answer []byte, err error) {
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	req := make([]byte, 0, len(body)+128)
	req = append(req, redis.Method+" "+redis.Path+" HTTP/1.1\r\nHost: "...)
	req = append(req, host...)
	req = append(req, "\r\nContent-Type: "+redis.ContentType+"\r\nContent-Length: "...)
	req = strconv.AppendInt(req, int64(len(body)), 10)
	req = append(append(req, "\r\n\r\n"...), body...)

	c := idle.take(host)
	status, answer, answered, err := c.roundTrip(host, req)
	// A kept-alive connection that the server has closed (a restart, for instance) answers
	// nothing at all; the request is then sent again once, on a new connection. A connection
	// that answered in part is not retried: the server may have run the command.
	if err != nil && c.reused && !answered && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		c = &webdisConn{}
		status, answer, _, err = c.roundTrip(host, req)
	}
	if err == nil && c.conn != nil {
		idle.put(host, c)
	}
	return status, answer, err
}

// webdisConn is one connection to a webdis; conn is nil until it is dialled, and again after
// an error or an answer that closes it.
type webdisConn struct {
	conn   net.Conn
	rd     *bufio.Reader
	reused bool
}

// roundTrip sends req and reads its answer, dialling first when c has no connection; answered
// says whether any of the answer arrived.
func (c *webdisConn) roundTrip(host string, req []byte) (status int, answer []byte, answered bool, err error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", host, startTimeout)
		if err != nil {
			return 0, nil, false, err
		}
		c.conn, c.rd = conn, bufio.NewReader(conn)
	}
	keep := false
	defer func() {
		if !keep {
			c.conn.Close()
			c.conn = nil
		}
	}()
	if err := c.conn.SetDeadline(time.Now().Add(startTimeout)); err != nil {
		return 0, nil, false, err
	}
	if _, err := c.conn.Write(req); err != nil {
		return 0, nil, false, err
	}
	// A connection closed before any answer reads io.EOF here (ReadResponse would say
	// io.ErrUnexpectedEOF, as for an answer cut short).
	if _, err := c.rd.Peek(1); err != nil {
		return 0, nil, false, err
	}
	resp, err := http.ReadResponse(c.rd, nil)
	if err != nil {
		return 0, nil, true, err
	}
	answer, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	keep = err == nil && !resp.Close
	return resp.StatusCode, answer, true, err
}

// idle holds the connections no call is using, by address.
var idle = idleConns{byHost: map[string][]*webdisConn{}}

type idleConns struct {
	mu     sync.Mutex
	byHost map[string][]*webdisConn
}

// take returns an idle connection to host, or a new one not dialled yet.
func (p *idleConns) take(host string) *webdisConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	conns := p.byHost[host]
	if len(conns) == 0 {
		return &webdisConn{}
	}
	c := conns[len(conns)-1]
	p.byHost[host] = conns[:len(conns)-1]
	c.reused = true
	return c
}

// put keeps c for the next call to host; beyond a few per address it is closed.
func (p *idleConns) put(host string, c *webdisConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.byHost[host]) >= 16 {
		c.conn.Close()
		return
	}
	p.byHost[host] = append(p.byHost[host], c)
}

// drop closes the idle connections to host, whose server is going away.
func (p *idleConns) drop(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.byHost[host] {
		c.conn.Close()
	}
	delete(p.byHost, host)
}
