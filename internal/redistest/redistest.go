// Package redistest starts a private redis-server with a webdis in front of it, for tests that
// need the real thing: the Lua scripts of sharedstate/redis, the filter's HTTP callouts, fault
// injection. It is a test helper and never part of the filter.
//
// Each Server runs in its own temporary directory on free loopback ports, keeps nothing on
// disk (no RDB, no AOF) and is stopped by t.Cleanup: both processes are killed and waited for,
// and on Linux they also die with the test binary (parent-death signal), so a crashed or killed
// test leaves no orphans behind.
//
// When redis-server or webdis is not installed, Start skips the test with one line saying which
// binary is missing, except when the environment has CI=true: there a missing service is a
// failure, never a silent skip.
package redistest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// startTimeout bounds how long Start and StartRedis wait for a process to answer. Both start in
// a few milliseconds on an idle machine; the bound only matters on a loaded CI runner.
const startTimeout = 10 * time.Second

// Server is a running redis-server and webdis pair. Its methods may be called from the test
// goroutine only, except Do, which is safe for concurrent use.
type Server struct {
	t   testing.TB
	dir string

	redisBin, webdisBin string
	redisPort           int
	webdisPort          int

	redis  *proc
	webdis *proc

	opts     Options
	password string

	connMu sync.Mutex
	conn   net.Conn
	rd     *bufio.Reader
}

// proc is a child process and a channel closed when it has exited (and been waited for).
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// Options adjusts the servers Start launches, for tests of a production-like setup.
type Options struct {
	// RedisArgs are appended to redis-server's command line, for example
	// {"--user", "default on >secret ~rl:* +evalsha"} to test least-privilege ACLs.
	RedisArgs []string
	// Webdis holds extra webdis.json settings (such as "acl" or "redis_auth"); they override
	// the defaults.
	Webdis map[string]any
}

// Start launches redis-server and webdis for t and returns when both answer a PING. They are
// stopped when t's cleanup runs.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with Options. When Options.Webdis["redis_auth"] is a string (a Redis
// password), the readiness probe and Do authenticate with it.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	redisBin, err1 := exec.LookPath("redis-server")
	webdisBin, err2 := exec.LookPath("webdis")
	if err1 != nil || err2 != nil {
		var missing []string
		if err1 != nil {
			missing = append(missing, "redis-server")
		}
		if err2 != nil {
			missing = append(missing, "webdis")
		}
		msg := fmt.Sprintf("redistest: %s not installed (apt-get install -y redis-server webdis)",
			strings.Join(missing, " and "))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &Server{t: t, dir: t.TempDir(), redisBin: redisBin, webdisBin: webdisBin, opts: opts}
	if pw, ok := opts.Webdis["redis_auth"].(string); ok {
		s.password = pw
	}
	t.Cleanup(s.stopAll)

	startOnFreePort(t, &s.redisPort, s.startRedis)
	startOnFreePort(t, &s.webdisPort, s.startWebdis)
	return s
}

// startOnFreePort picks a free port into *port and runs start, up to three times: a port found
// free by binding :0 can be taken by someone else before the server binds it, and a new port
// makes that race harmless.
func startOnFreePort(t testing.TB, port *int, start func() error) {
	t.Helper()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		*port = freePort(t)
		if err = start(); err == nil {
			return
		}
	}
	t.Fatalf("redistest: %v", err)
}

// RedisAddr is the host:port of the redis-server.
func (s *Server) RedisAddr() string { return "127.0.0.1:" + strconv.Itoa(s.redisPort) }

// WebdisURL is the base URL of webdis, with a trailing slash ("http://127.0.0.1:port/"):
// commands are POSTed to it with the command in the body.
func (s *Server) WebdisURL() string {
	return "http://127.0.0.1:" + strconv.Itoa(s.webdisPort) + "/"
}

// WebdisAddr is the host:port of webdis.
func (s *Server) WebdisAddr() string { return "127.0.0.1:" + strconv.Itoa(s.webdisPort) }

// StopRedis kills the redis-server and waits for it to exit. webdis keeps running and answers
// 503 until StartRedis brings Redis back. All data is lost (there is no persistence).
func (s *Server) StopRedis() {
	s.t.Helper()
	s.closeConn()
	s.redis.stop()
}

// StartRedis starts the redis-server again on the same port after StopRedis. webdis reconnects
// by itself on its next request.
func (s *Server) StartRedis() {
	s.t.Helper()
	s.restart(s.redis, s.startRedis)
}

// StopWebdis kills webdis and waits for it to exit; its port then refuses connections.
func (s *Server) StopWebdis() {
	s.t.Helper()
	idle.drop(s.WebdisAddr())
	s.webdis.stop()
}

// StartWebdis starts webdis again on the same port after StopWebdis.
func (s *Server) StartWebdis() {
	s.t.Helper()
	s.restart(s.webdis, s.startWebdis)
}

// restart runs start for a process that was stopped, on the port it had. The port was just
// released by this process; another process grabbing it in between is unlikely enough on
// loopback that a clear failure is better than moving the port, which the other server of the
// pair would not follow.
func (s *Server) restart(p *proc, start func() error) {
	s.t.Helper()
	if p != nil && !p.exited() {
		s.t.Fatalf("redistest: restarting %s while it is running", p.name)
	}
	if err := start(); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

func (s *Server) stopAll() {
	s.closeConn()
	idle.drop(s.WebdisAddr())
	if s.webdis != nil {
		s.webdis.stop()
	}
	if s.redis != nil {
		s.redis.stop()
	}
}

func (s *Server) startRedis() error {
	args := []string{
		"--port", strconv.Itoa(s.redisPort),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--protected-mode", "yes",
		"--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis.log"),
		// webdis uses database 0 only, and a test needs no large accept backlog.
		"--databases", "1",
		"--tcp-backlog", "128",
	}
	args = append(args, s.opts.RedisArgs...)
	p, err := spawn("redis-server", s.redisBin, args, s.dir)
	if err != nil {
		return err
	}
	s.redis = p
	if err := waitFor(p, func() error { return p.answers(s.redisPort, pingRedis(s.RedisAddr(), s.password)) }); err != nil {
		p.stop()
		return fmt.Errorf("redis-server on %s: %v%s", s.RedisAddr(), err,
			tail(filepath.Join(s.dir, "redis.log")))
	}
	return nil
}

func (s *Server) startWebdis() error {
	// webdis reads only a config file. threads and pool_size are kept small: tests run on
	// two shared cores, and one connection per thread is enough for a sequential client.
	conf := map[string]any{
		"redis_host": "127.0.0.1",
		"redis_port": s.redisPort,
		"redis_auth": nil,
		"http_host":  "127.0.0.1",
		"http_port":  s.webdisPort,
		"threads":    1,
		"pool_size":  2,
		"daemonize":  false,
		"database":   0,
		"verbosity":  1,
		"logfile":    filepath.Join(s.dir, "webdis.log"),
	}
	for k, v := range s.opts.Webdis {
		conf[k] = v
	}
	data, err := json.MarshalIndent(conf, "", "\t")
	if err != nil {
		return err
	}
	confPath := filepath.Join(s.dir, "webdis.json")
	if err := os.WriteFile(confPath, data, 0o600); err != nil {
		return err
	}
	p, err := spawn("webdis", s.webdisBin, []string{confPath}, s.dir)
	if err != nil {
		return err
	}
	s.webdis = p
	// webdis answers PING only when its ACL allows it; any HTTP answer from a process that
	// has connected to Redis is enough then, so the probe accepts 403 too.
	if err := waitFor(p, func() error { return p.answers(s.webdisPort, pingWebdis(s.WebdisAddr())) }); err != nil {
		p.stop()
		return fmt.Errorf("webdis on %s: %v%s", s.WebdisAddr(), err,
			tail(filepath.Join(s.dir, "webdis.log")))
	}
	return nil
}

// spawn starts bin with args in dir, its output going to <dir>/<name>.out.
func spawn(name, bin string, args []string, dir string) (*proc, error) {
	out, err := os.OpenFile(filepath.Join(dir, name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.Stdin = nil
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// stop kills the process and waits until it has exited. It is idempotent.
func (p *proc) stop() {
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// answers returns the error of a probe of port, or an error when the probe was answered but
// not by p (see listensOn).
func (p *proc) answers(port int, probe error) error {
	if probe != nil {
		return probe
	}
	if ours, err := listensOn(p.cmd.Process.Pid, port); err != nil || !ours {
		return fmt.Errorf("port %d answers, but %s does not listen on it (%v)", port, p.name, err)
	}
	return nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor polls ready until it succeeds, the process exits or startTimeout passes.
func waitFor(p *proc, ready func() error) error {
	deadline := time.Now().Add(startTimeout)
	delay := 2 * time.Millisecond
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("exited during start (%v)", p.cmd.ProcessState)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", startTimeout, err)
		}
		time.Sleep(delay)
		if delay < 100*time.Millisecond {
			delay *= 2
		}
	}
}

func pingRedis(addr, password string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	rd := bufio.NewReader(c)
	if password != "" {
		if _, err := c.Write(command("AUTH", password)); err != nil {
			return err
		}
		if line, err := rd.ReadString('\n'); err != nil {
			return err
		} else if line != "+OK\r\n" {
			return fmt.Errorf("AUTH answered %q", line)
		}
	}
	if _, err := c.Write(command("PING")); err != nil {
		return err
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	// A user whose ACL forbids PING is answered NOPERM, which proves the server is up too.
	if line != "+PONG\r\n" && !strings.HasPrefix(line, "-NOPERM") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// pingWebdis sends one POST PING over a raw connection. webdis is ready when it answers 200
// with Redis' PONG, or 403 when its ACL forbids PING (a 503 means it runs but has not reached
// Redis yet).
func pingWebdis(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	req := "POST / HTTP/1.1\r\nHost: webdis\r\nContent-Length: 4\r\nConnection: close\r\n\r\nPING"
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	resp, err := io.ReadAll(c)
	if err != nil && len(resp) == 0 {
		return err
	}
	if bytes.HasPrefix(resp, []byte("HTTP/1.1 403")) ||
		bytes.HasPrefix(resp, []byte("HTTP/1.1 200")) && bytes.Contains(resp, []byte("PONG")) {
		return nil
	}
	first, _, _ := bytes.Cut(resp, []byte("\r\n"))
	return fmt.Errorf("PING answered %q", first)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: no free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tail returns the end of a log file, for start failures.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 1024 {
		b = b[len(b)-1024:]
	}
	return "\n" + path + ":\n" + string(b)
}

// DefaultParallel makes n the number of parallel tests a package runs at a time unless the
// command line sets -test.parallel; call it from TestMain after flag.Parse. Tests that wait on
// Redis, webdis or Redis' real clock hold a slot while they wait, so a package of them keeps
// the cores busy only with more slots than the default (the number of CPUs).
func DefaultParallel(n int) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
