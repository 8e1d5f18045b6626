package redistest_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
)

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	status, answer, err := redistest.Post(url, []byte(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return status, string(answer)
}

// A server that closes a kept-alive connection after one answer, as a restarted or idle-timing
// webdis does: Post finds its idle connection dead, sends the request again on a new one, and
// the server sees each request once.
func TestPostAfterTheServerClosedItsConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var requests atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				body, _ := io.ReadAll(req.Body)
				requests.Add(1)
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			}()
		}
	}()
	url := "http://" + l.Addr().String() + "/"
	for i, body := range []string{"PING/1", "PING/2", "PING/3"} {
		if status, answer := post(t, url, body); status != 200 || answer != body {
			t.Fatalf("call %d answered %d %q, want 200 %q", i, status, answer, body)
		}
	}
	if n := requests.Load(); n != 3 {
		t.Fatalf("the server saw %d requests, want 3", n)
	}
	l.Close()
	if _, _, err := redistest.Post(url, []byte("PING")); err == nil {
		t.Fatal("Post to a closed port succeeded")
	}
}

// TestLifecycle checks that both servers answer, that webdis reaches this Redis (and no other),
// and that stopping and restarting Redis turns webdis' answer to 503 and back.
func TestLifecycle(t *testing.T) {
	s := redistest.Start(t)
	if got := s.MustDo("SET", "k", "v\x00\xff"); got != "OK" {
		t.Fatalf("SET answered %v", got)
	}
	if status, body := post(t, s.WebdisURL(), "STRLEN/k"); status != 200 || body != `{"STRLEN":3}` {
		t.Fatalf("webdis STRLEN: %d %s, want the key set over RESP", status, body)
	}
	if _, err := s.Do("NOSUCHCOMMAND"); err == nil {
		t.Fatal("error reply not returned as error")
	} else if _, ok := err.(redistest.Error); !ok {
		t.Fatalf("error reply is %T, want redistest.Error", err)
	}

	s.StopRedis()
	if status, _ := post(t, s.WebdisURL(), "PING"); status != 503 {
		t.Fatalf("webdis with Redis stopped: %d, want 503", status)
	}
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("Do succeeded with Redis stopped")
	}
	s.StartRedis()
	// webdis reconnects lazily: the first request after a restart may still fail.
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, _ := post(t, s.WebdisURL(), "PING")
		if status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webdis did not reconnect: last status %d", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := s.Int("DBSIZE"); n != 0 {
		t.Fatalf("DBSIZE after restart = %d, want 0 (no persistence)", n)
	}

	s.StopWebdis()
	if _, err := http.Post(s.WebdisURL(), "text/plain", strings.NewReader("PING")); err == nil {
		t.Fatal("webdis still answers after StopWebdis")
	}
	s.StartWebdis()
	if status, _ := post(t, s.WebdisURL(), "PING"); status != 200 {
		t.Fatalf("webdis after StartWebdis: %d", status)
	}
}

func TestSlowProxy(t *testing.T) {
	s := redistest.Start(t)
	const delay = 100 * time.Millisecond
	url := s.SlowProxy(delay)
	start := time.Now()
	status, body := post(t, url, "PING")
	if status != 200 || body != `{"PING":[true,"PONG"]}` {
		t.Fatalf("through proxy: %d %s", status, body)
	}
	if d := time.Since(start); d < delay {
		t.Fatalf("answer after %v, want at least %v", d, delay)
	}
}

func TestGarbageServer(t *testing.T) {
	url := redistest.GarbageServer(t, 200, []byte("not json"))
	for i := 0; i < 2; i++ { // twice: the server keeps the connection alive
		if status, body := post(t, url, "EVALSHA/x/0"); status != 200 || body != "not json" {
			t.Fatalf("garbage server: %d %q", status, body)
		}
	}
}

// DoAll runs a pipeline in order, reports the first error reply with its index, and leaves
// the connection in step: the next Do reads its own reply.
func TestDoAll(t *testing.T) {
	s := redistest.Start(t)
	replies, err := s.DoAll([]string{"SET", "k", "1"}, []string{"INCR", "k"}, []string{"HSET", "k", "f", "v"},
		[]string{"INCR", "k"}, []string{"GET", "k"})
	if err == nil || !strings.Contains(err.Error(), "command 2 of 5") || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("DoAll error %v, want command 2's WRONGTYPE", err)
	}
	if want := []any{"OK", int64(2), nil, int64(3), "3"}; fmt.Sprint(replies) != fmt.Sprint(want) {
		t.Fatalf("DoAll replies %v, want %v", replies, want)
	}
	if v := s.MustDo("GET", "k"); v != "3" {
		t.Fatalf("GET after DoAll: %v", v)
	}
	if replies, err := s.DoAll(); err != nil || len(replies) != 0 {
		t.Fatalf("empty DoAll: %v %v", replies, err)
	}
}
