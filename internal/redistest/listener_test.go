package redistest

import (
	"strings"
	"testing"
)

// TestStartOnATakenPort: a redis-server and a webdis started on ports another test's servers
// hold fail to bind and exit; the probes, answered by those other servers, must not count as
// theirs starting.
func TestStartOnATakenPort(t *testing.T) {
	other := Start(t)
	s := &Server{t: t, dir: t.TempDir(), redisBin: other.redisBin, webdisBin: other.webdisBin}
	t.Cleanup(s.stopAll)
	s.redisPort = other.redisPort
	if err := s.startRedis(); err == nil || !strings.Contains(err.Error(), "redis-server on") {
		t.Fatalf("redis-server on another server's port started: %v", err)
	}
	s.redisPort, s.webdisPort = other.redisPort, other.webdisPort
	if err := s.startWebdis(); err == nil || !strings.Contains(err.Error(), "webdis on") {
		t.Fatalf("webdis on another server's port started: %v", err)
	}
	ours, err := listensOn(other.redis.cmd.Process.Pid, other.redisPort)
	if err != nil || !ours {
		t.Fatalf("listensOn(the port's own redis-server) = %v, %v", ours, err)
	}
}
