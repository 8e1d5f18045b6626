package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Sharded is a sharded Redis behind one webdis: webdis -> nutcracker (twemproxy, Twitter's
// Redis sharding proxy) -> several redis-servers. nutcracker hashes each command's key, or the
// part of it inside {braces} (its hash_tag), with MurmurHash and places it on a ketama ring of
// the shards (nutcracker's default hash, fnv1a_64, put 30 of 30 short tags on one of three
// shards here with ketama, so the harness uses murmur, as an operator should); an EVAL or
// EVALSHA goes to the shard of its first key, which runs it whole: nutcracker does not check
// where its other keys hash, so a key written there that hashes elsewhere is one nutcracker
// never finds again (TestShardedKeyPrefixes checks the layout against that). The embedded Server is the front (webdis, with nutcracker as its
// Redis): WebdisURL, Do (single-key commands only, routed like any other) and StopWebdis work
// on it; Shards are the redis-servers themselves.
//
// nutcracker runs with auto_eject_hosts off, so a shard that is down stays on the ring: the
// commands for its keys fail (webdis answers 200 with an error) while every other shard keeps
// answering, which is what a test of one shard's outage needs.
type Sharded struct {
	*Server
	Shards []*Server

	nutcrackerBin string
	proxyPort     int
	nutcracker    *proc
}

// StartSharded launches n redis-servers, nutcracker in front of them and webdis in front of
// nutcracker, and returns when all answer. They are stopped when t's cleanup runs. Without
// nutcracker installed it skips (fails under CI=true), like Start.
func StartSharded(t testing.TB, n int) *Sharded {
	t.Helper()
	return StartShardedWith(t, n, Options{})
}

// StartShardedWith is StartSharded with Options; RedisArgs apply to every shard and Webdis to
// the one webdis.
func StartShardedWith(t testing.TB, n int, opts Options) *Sharded {
	t.Helper()
	bin, err := exec.LookPath("nutcracker")
	if err != nil {
		// nutcracker is in /usr/sbin on Debian, which a user's PATH may lack.
		if _, serr := os.Stat("/usr/sbin/nutcracker"); serr == nil {
			bin, err = "/usr/sbin/nutcracker", nil
		}
	}
	if err != nil {
		msg := "redistest: nutcracker not installed (apt-get install -y nutcracker)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &Sharded{nutcrackerBin: bin}
	for range n {
		// A shard is a Server whose webdis is never started.
		sh := startRedisOnly(t, opts)
		s.Shards = append(s.Shards, sh)
	}
	front := &Server{t: t, dir: t.TempDir(), opts: Options{Webdis: opts.Webdis}}
	front.webdisBin = s.Shards[0].webdisBin
	s.Server = front
	t.Cleanup(func() {
		front.stopAll()
		s.nutcracker.stop()
	})
	startOnFreePort(t, &s.proxyPort, s.startNutcracker)
	front.redisPort = s.proxyPort
	startOnFreePort(t, &front.webdisPort, front.startWebdis)
	return s
}

// startRedisOnly starts a redis-server alone, as one shard.
func startRedisOnly(t testing.TB, opts Options) *Server {
	t.Helper()
	redisBin, err1 := exec.LookPath("redis-server")
	webdisBin, err2 := exec.LookPath("webdis")
	if err1 != nil || err2 != nil {
		msg := "redistest: redis-server or webdis not installed (apt-get install -y redis-server webdis)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &Server{t: t, dir: t.TempDir(), redisBin: redisBin, webdisBin: webdisBin,
		opts: Options{RedisArgs: opts.RedisArgs}}
	t.Cleanup(s.stopAll)
	startOnFreePort(t, &s.redisPort, s.startRedis)
	return s
}

func (s *Sharded) startNutcracker() error {
	dir := s.Server.dir
	var b strings.Builder
	fmt.Fprintf(&b, "rl:\n  listen: 127.0.0.1:%d\n  hash: murmur\n  hash_tag: \"{}\"\n", s.proxyPort)
	// timeout bounds how long a command waits for a shard before nutcracker answers "ERR
	// Connection timed out". No test relies on it firing: a stopped shard refuses connections
	// at once (server_retry_timeout and auto_eject_hosts false keep it on the ring, failing
	// only its own keys). It only guards against a hung shard, so it is far above the worst
	// answer time of a loaded 2-core machine (1s was exceeded there under load average 8, which
	// failed commands that would have succeeded), and below the 10s of the tests' HTTP
	// clients, so that a hung shard still shows as nutcracker's error.
	b.WriteString("  distribution: ketama\n  redis: true\n  timeout: 8000\n  auto_eject_hosts: false\n" +
		"  server_retry_timeout: 100\n  server_connections: 1\n  preconnect: false\n  servers:\n")
	for i, sh := range s.Shards {
		fmt.Fprintf(&b, "    - %s:1 shard%d\n", sh.RedisAddr(), i)
	}
	conf := filepath.Join(dir, "nutcracker.yml")
	if err := os.WriteFile(conf, []byte(b.String()), 0o600); err != nil {
		return err
	}
	p, err := spawn("nutcracker", s.nutcrackerBin, []string{"-c", conf,
		"-s", strconv.Itoa(freePort(s.Server.t)), "-a", "127.0.0.1",
		"-o", filepath.Join(dir, "nutcracker.log")}, dir)
	if err != nil {
		return err
	}
	s.nutcracker = p
	// nutcracker answers PING itself (0.5.0), so a PONG means it listens.
	addr := "127.0.0.1:" + strconv.Itoa(s.proxyPort)
	if err := waitFor(p, func() error { return p.answers(s.proxyPort, pingRedis(addr, "")) }); err != nil {
		p.stop()
		return fmt.Errorf("nutcracker on %s: %v%s", addr, err, tail(filepath.Join(dir, "nutcracker.log")))
	}
	return nil
}

// Keys returns every key of every shard.
func (s *Sharded) Keys() []string {
	var all []string
	for _, sh := range s.Shards {
		all = append(all, sh.Keys()...)
	}
	return all
}

// ShardOf returns the index of the shard that holds key, or -1 when none does.
func (s *Sharded) ShardOf(key string) int {
	for i, sh := range s.Shards {
		if sh.Int("EXISTS", key) == 1 {
			return i
		}
	}
	return -1
}

// StopShard kills shard i's redis-server; nutcracker keeps it on its ring, so the commands for
// its keys fail until StartShard while the other shards keep answering.
func (s *Sharded) StopShard(i int) { s.Shards[i].StopRedis() }

// StartShard starts shard i again on its port after StopShard; it comes back empty.
func (s *Sharded) StartShard(i int) { s.Shards[i].StartRedis() }
