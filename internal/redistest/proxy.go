package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// SlowProxy starts a TCP proxy in front of webdis that holds every chunk of webdis' answer for
// delay before passing it on, and returns its base URL ("http://127.0.0.1:port/"). Requests go
// through undelayed. It stands in for a slow or overloaded Redis path in callout-timeout tests.
// The proxy is closed by t's cleanup.
func (s *Server) SlowProxy(delay time.Duration) string {
	s.t.Helper()
	target := s.WebdisAddr()
	return "http://" + serve(s.t, func(client net.Conn) {
		upstream, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			return
		}
		requestDone := make(chan struct{})
		// Closing both ends ends the request copy too, so serve's cleanup, which waits for
		// this handler, also waits for that goroutine.
		defer func() {
			upstream.Close()
			client.Close()
			<-requestDone
		}()
		go func() {
			defer close(requestDone)
			_, _ = io.Copy(upstream, client)
			// Half-close so webdis sees the end of the request stream, as a real client would.
			if tc, ok := upstream.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
		}()
		buf := make([]byte, 32<<10)
		for {
			n, err := upstream.Read(buf)
			if n > 0 {
				time.Sleep(delay)
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}) + "/"
}

// GarbageServer starts an HTTP server that answers every request, whatever it is, with status
// and body (Content-Type application/json, as webdis would say), and returns its base URL. It
// stands in for a webdis that answers something the codec must reject. It is closed by t's
// cleanup.
func GarbageServer(t testing.TB, status int, body []byte) string {
	t.Helper()
	return "http://" + serve(t, func(c net.Conn) {
		rd := bufio.NewReader(c)
		for {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			req, err := http.ReadRequest(rd)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			req.Body.Close()
			head := "HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n" +
				"Content-Type: application/json\r\n" +
				"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
			if _, err := io.WriteString(c, head); err != nil {
				return
			}
			if _, err := c.Write(body); err != nil {
				return
			}
		}
	}) + "/"
}

// serve accepts connections on a fresh loopback port and runs handle for each, closing the
// connection when handle returns. Cleanup closes the listener and every open connection and
// waits for the handlers, so no goroutine outlives the test.
func serve(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: listen: %v", err)
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(c)
				c.Close()
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		idle.drop(l.Addr().String())
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// String describes the server for test logs.
func (s *Server) String() string {
	return fmt.Sprintf("redis %s, webdis %s", s.RedisAddr(), s.WebdisURL())
}
