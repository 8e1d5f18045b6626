package e2e

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
)

// composeFile is the part of docker-compose.yml the consistency check reads.
type composeFile struct {
	Services map[string]struct {
		Image   string   `yaml:"image"`
		Volumes []string `yaml:"volumes"`
		Ports   []string `yaml:"ports"`
	} `yaml:"services"`
}

// TestComposeMatchesConfigs checks, without Docker, that docker-compose.yml and the Envoy
// configurations it mounts agree: every Envoy gets its configuration and the module where the
// configuration loads it from, every listener and admin port is published, the cluster
// addresses name compose services on the ports those services listen on, and the Envoy image
// is one the module runs in (>= 1.39). A drift between these files would otherwise only show
// on a machine with Docker.
func TestComposeMatchesConfigs(t *testing.T) {
	data, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(data, &cf); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	envoys := map[string]string{ // service -> configuration it must mount
		"envoy":               "../envoy.yaml",
		"envoy2":              "../envoy.yaml",
		"envoy-failure-modes": "./envoy-failure-modes.yaml",
	}
	imageTag := regexp.MustCompile(`^envoyproxy/envoy:v1\.(\d+)\.\d+$`)
	for svc, confPath := range envoys {
		s, ok := cf.Services[svc]
		if !ok {
			t.Fatalf("docker-compose.yml has no service %q", svc)
		}
		if s.Image != envoyImage {
			t.Errorf("%s: image %q, but TestEnvoy pulls %q", svc, s.Image, envoyImage)
		}
		m := imageTag.FindStringSubmatch(s.Image)
		if m == nil {
			t.Fatalf("%s: image %q is not a pinned envoyproxy/envoy:v1.N.P", svc, s.Image)
		}
		if minor, _ := strconv.Atoi(m[1]); minor < 39 {
			t.Fatalf("%s: image %q: the module needs Envoy >= 1.39", svc, s.Image)
		}
		c, err := envoyconf.Load(filepath.FromSlash(confPath))
		if err != nil {
			t.Fatal(err)
		}
		mounts := map[string]string{} // container path -> host path
		for _, v := range s.Volumes {
			// host:container[:mode], where host may be "${VAR:-default}" with a colon in it.
			v = strings.TrimSuffix(strings.TrimSuffix(v, ":ro"), ":rw")
			i := strings.LastIndexByte(v, ':')
			if i < 0 {
				t.Fatalf("%s: volume %q", svc, v)
			}
			mounts[v[i+1:]] = v[:i]
		}
		if mounts["/etc/envoy/envoy.yaml"] != confPath {
			t.Errorf("%s: /etc/envoy/envoy.yaml comes from %q, want %q", svc, mounts["/etc/envoy/envoy.yaml"], confPath)
		}
		published := map[int]bool{} // container ports
		for _, p := range s.Ports {
			hostPart, ctr, ok := strings.Cut(strings.TrimSuffix(p, "/tcp"), ":")
			if !ok {
				t.Fatalf("%s: port %q: publish host:container", svc, p)
			}
			lo, hi := portRange(t, ctr)
			hlo, hhi := portRange(t, hostPart)
			if hhi-hlo != hi-lo {
				t.Fatalf("%s: port %q: ranges differ in length", svc, p)
			}
			for port := lo; port <= hi; port++ {
				published[port] = true
			}
		}
		for _, l := range c.Listeners {
			if got := mounts[l.Filter.CodeFile]; !strings.Contains(got, "ratelimit.wasm") {
				t.Errorf("%s: listener %s loads %s, which is not mounted from the built module (%q)", svc, l.Name, l.Filter.CodeFile, got)
			}
			if !published[port(t, l.Address)] {
				t.Errorf("%s: listener %s (%s) is not published", svc, l.Name, l.Address)
			}
		}
		if !published[port(t, c.Admin)] {
			t.Errorf("%s: admin %s is not published", svc, c.Admin)
		}
		// Clusters are reached by compose service name, on the port the service listens on.
		servicePorts := map[string]int{"upstream": 8080, "webdis": webdisPort(t)}
		for name, cl := range c.Clusters {
			host, p, err := net.SplitHostPort(cl.Address)
			if err != nil {
				t.Fatal(err)
			}
			want, ok := servicePorts[host]
			if !ok {
				t.Errorf("%s: cluster %s points at %q, which is not a compose service", confPath, name, host)
				continue
			}
			if p != strconv.Itoa(want) {
				t.Errorf("%s: cluster %s points at port %s, service %s listens on %d", confPath, name, p, host, want)
			}
		}
	}
	for _, svc := range []string{"upstream", "redis", "webdis"} {
		if _, ok := cf.Services[svc]; !ok {
			t.Errorf("docker-compose.yml has no service %q", svc)
		}
	}
	if got := cf.Services["redis"].Image; got != redisImage {
		t.Errorf("redis: image %q, but TestEnvoy pulls %q", got, redisImage)
	}
	dockerfile, err := os.ReadFile(filepath.Join("..", "wasmhost", "echo", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dockerfile), `"-listen", ":8080"`) {
		t.Error("wasmhost/echo/Dockerfile no longer serves on :8080, where envoy.yaml's upstream cluster points")
	}
}

func webdisPort(t *testing.T) int {
	data, err := os.ReadFile(filepath.Join("webdis", "webdis.json"))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		RedisHost string `json:"redis_host"`
		HTTPPort  int    `json:"http_port"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatalf("webdis/webdis.json: %v", err)
	}
	if conf.RedisHost != "redis" {
		t.Errorf("webdis/webdis.json: redis_host %q, want the compose service redis", conf.RedisHost)
	}
	return conf.HTTPPort
}

func portRange(t *testing.T, s string) (lo, hi int) {
	t.Helper()
	a, b, isRange := strings.Cut(s, "-")
	lo, err := strconv.Atoi(a)
	if err != nil {
		t.Fatalf("port %q", s)
	}
	hi = lo
	if isRange {
		if hi, err = strconv.Atoi(b); err != nil {
			t.Fatalf("port %q", s)
		}
	}
	return lo, hi
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}
