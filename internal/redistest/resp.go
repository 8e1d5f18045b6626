package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Error is an error reply from Redis ("-ERR ..."), returned by Do as its error and found as an
// element of array replies.
type Error string

// Error returns Redis' message as it is, without the leading '-'.
func (e Error) Error() string { return string(e) }

// Do sends one command straight to Redis over RESP, bypassing webdis, and returns the reply:
// int64 for integers, string for bulk and simple strings (binary-safe), nil for a null reply,
// []any for arrays, and an Error as the error for an error reply. Tests use it to look at what
// really reached Redis (keys, TTLs, script cache) without trusting the code under test.
//
// Do keeps one connection open and reconnects after a failure (for example after StopRedis).
// It is safe for concurrent use.
func (s *Server) Do(args ...string) (any, error) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if err := s.connectLocked(); err != nil {
		return nil, err
	}
	_ = s.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.conn.Write(command(args...)); err != nil {
		s.closeConnLocked()
		return nil, err
	}
	v, err := readReply(s.rd)
	if err != nil {
		if _, isReply := err.(Error); !isReply {
			// A broken stream cannot be resynchronised: drop the connection.
			s.closeConnLocked()
		}
		return nil, err
	}
	return v, nil
}

// DoAll sends the commands straight to Redis as one pipeline (all written, then the replies
// read in order) and returns their replies as Do does, or the first error, an error reply
// included. Redis runs them one after the other as if sent by Do one at a time: the pipeline
// saves the round trip of each, for tests that send thousands.
func (s *Server) DoAll(cmds ...[]string) ([]any, error) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if err := s.connectLocked(); err != nil {
		return nil, err
	}
	var buf []byte
	for _, args := range cmds {
		buf = append(buf, command(args...)...)
	}
	_ = s.conn.SetDeadline(time.Now().Add(5*time.Second + time.Duration(len(cmds))*time.Millisecond))
	if _, err := s.conn.Write(buf); err != nil {
		s.closeConnLocked()
		return nil, err
	}
	replies := make([]any, len(cmds))
	var first error
	for i := range cmds {
		v, err := readReply(s.rd)
		if err != nil {
			if _, isReply := err.(Error); !isReply {
				s.closeConnLocked()
				return nil, err
			}
			if first == nil {
				first = fmt.Errorf("command %d of %d: %w", i, len(cmds), err)
			}
		}
		replies[i] = v
	}
	return replies, first
}

// MustDo is Do that fails the test on any error, including an error reply. Call it from the
// test goroutine only (it uses t.Fatal).
func (s *Server) MustDo(args ...string) any {
	s.t.Helper()
	v, err := s.Do(args...)
	if err != nil {
		s.t.Fatalf("redistest: %q: %v", args, err)
	}
	return v
}

// Int is MustDo for commands that answer an integer (DBSIZE, PTTL, EXISTS, ...).
func (s *Server) Int(args ...string) int64 {
	s.t.Helper()
	v := s.MustDo(args...)
	n, ok := v.(int64)
	if !ok {
		s.t.Fatalf("redistest: %q answered %T %v, want an integer", args, v, v)
	}
	return n
}

// Keys returns every key in the database (KEYS *); fine for the handful of keys a test makes.
func (s *Server) Keys() []string {
	s.t.Helper()
	v := s.MustDo("KEYS", "*")
	arr, _ := v.([]any)
	keys := make([]string, 0, len(arr))
	for _, k := range arr {
		str, ok := k.(string)
		if !ok {
			s.t.Fatalf("redistest: KEYS returned %T", k)
		}
		keys = append(keys, str)
	}
	return keys
}

// command encodes args as a RESP array of bulk strings.
func command(args ...string) []byte {
	buf := make([]byte, 0, 64)
	buf = append(buf, '*')
	buf = strconv.AppendInt(buf, int64(len(args)), 10)
	buf = append(buf, '\r', '\n')
	for _, a := range args {
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(a)), 10)
		buf = append(buf, '\r', '\n')
		buf = append(buf, a...)
		buf = append(buf, '\r', '\n')
	}
	return buf
}

// connectLocked opens Do's connection unless it is open, and authenticates when the server
// has a password.
func (s *Server) connectLocked() error {
	if s.conn != nil {
		return nil
	}
	c, err := net.DialTimeout("tcp", s.RedisAddr(), time.Second)
	if err != nil {
		return err
	}
	s.conn, s.rd = c, bufio.NewReader(c)
	if s.password != "" {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(command("AUTH", s.password)); err != nil {
			s.closeConnLocked()
			return err
		}
		if _, err := readReply(s.rd); err != nil {
			s.closeConnLocked()
			return err
		}
	}
	return nil
}

func (s *Server) closeConn() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	s.closeConnLocked()
}

func (s *Server) closeConnLocked() {
	if s.conn != nil {
		s.conn.Close()
		s.conn, s.rd = nil, nil
	}
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (any, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if len(line) == 0 {
		return nil, fmt.Errorf("redistest: empty RESP line")
	}
	body := string(line[1:])
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, Error(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return string(b[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			v, err := readReply(r)
			if e, isReply := err.(Error); isReply {
				arr[i] = e
				continue
			}
			if err != nil {
				return nil, err
			}
			arr[i] = v
		}
		return arr, nil
	}
	return nil, fmt.Errorf("redistest: unexpected RESP type %q", line[0])
}

func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("redistest: malformed RESP line %q", line)
	}
	return line[:len(line)-2], nil
}
