package e2e

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"go.yaml.in/yaml/v3"

	// The typed configurations of redis-proxy.yaml, registered so that the bootstrap's
	// "@type"s resolve and their validation rules run.
	redisclusterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/redis/v3"
	redisproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/redis_proxy/v3"

	"github.com/ratelimit-wasm/ratelimit/filter/config"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/envoyconf"
)

// TestRedisClusterCompose checks, without Docker, the Redis Cluster deployment of
// e2e/redis-cluster: both Envoy files pass Envoy's API validation rules; redis-proxy.yaml
// routes by hash tag, follows redirections and discovers the cluster from a node the compose
// file runs; webdis points at the redis_proxy listener; and the filter's configuration parses,
// spreads its global rules over several partitions, and reaches webdis and the upstream on the
// ports those services listen on.
func TestRedisClusterCompose(t *testing.T) {
	dir := "redis-cluster"
	data, err := os.ReadFile(filepath.Join(dir, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(data, &cf); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, svc := range []string{"redis-1", "redis-2", "redis-3", "redis-cluster-init", "redis-proxy", "webdis", "upstream", "envoy"} {
		if _, ok := cf.Services[svc]; !ok {
			t.Errorf("redis-cluster/docker-compose.yml has no service %q", svc)
		}
	}
	for _, svc := range []string{"envoy", "redis-proxy"} {
		if got := cf.Services[svc].Image; got != envoyImage {
			t.Errorf("%s: image %q, want %q as the other e2e Envoys", svc, got, envoyImage)
		}
	}

	// redis-proxy.yaml: Envoy's redis_proxy in front of the cluster.
	raw, err := os.ReadFile(filepath.Join(dir, "redis-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := envoyconf.ParseBootstrap(raw)
	if err != nil {
		t.Fatalf("redis-proxy.yaml: %v", err)
	}
	ls := bs.GetStaticResources().GetListeners()
	if len(ls) != 1 || len(ls[0].GetFilterChains()) != 1 || len(ls[0].GetFilterChains()[0].GetFilters()) != 1 {
		t.Fatal("redis-proxy.yaml: want one listener with one filter")
	}
	proxyPort := int(ls[0].GetAddress().GetSocketAddress().GetPortValue())
	rp := &redisproxyv3.RedisProxy{}
	if err := ls[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(rp); err != nil {
		t.Fatalf("redis-proxy.yaml: the filter is not redis_proxy: %v", err)
	}
	s := rp.GetSettings()
	if !s.GetEnableHashtagging() {
		t.Error("redis_proxy: enable_hashtagging is off, so a call's keys would be routed by their whole names, not their common tag")
	}
	if !s.GetEnableRedirection() {
		t.Error("redis_proxy: enable_redirection is off, so a MOVED or ASK during a slot migration fails the call")
	}
	clusterName := rp.GetPrefixRoutes().GetCatchAllRoute().GetCluster()
	var seeds []string
	for _, cl := range bs.GetStaticResources().GetClusters() {
		if cl.GetName() != clusterName {
			continue
		}
		if cl.GetClusterType().GetName() != "envoy.clusters.redis" {
			t.Errorf("cluster %s: type %q, want envoy.clusters.redis (cluster mode)", clusterName, cl.GetClusterType().GetName())
		}
		if err := cl.GetClusterType().GetTypedConfig().UnmarshalTo(&redisclusterv3.RedisClusterConfig{}); err != nil {
			t.Errorf("cluster %s: %v", clusterName, err)
		}
		for _, e := range cl.GetLoadAssignment().GetEndpoints() {
			for _, lb := range e.GetLbEndpoints() {
				sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
				seeds = append(seeds, sa.GetAddress())
				if sa.GetPortValue() != 6379 {
					t.Errorf("cluster %s: seed %s on port %d, the nodes listen on 6379", clusterName, sa.GetAddress(), sa.GetPortValue())
				}
			}
		}
	}
	if len(seeds) == 0 {
		t.Fatalf("redis-proxy.yaml: no seed node for the route's cluster %q", clusterName)
	}
	for _, h := range seeds {
		if _, ok := cf.Services[h]; !ok {
			t.Errorf("redis-proxy.yaml: seed %q is not a compose service", h)
		}
	}

	// webdis talks to redis_proxy.
	var wd struct {
		RedisHost string `json:"redis_host"`
		RedisPort int    `json:"redis_port"`
		HTTPPort  int    `json:"http_port"`
	}
	wraw, err := os.ReadFile(filepath.Join(dir, "webdis.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(wraw, &wd); err != nil {
		t.Fatalf("webdis.json: %v", err)
	}
	if wd.RedisHost != "redis-proxy" || wd.RedisPort != proxyPort {
		t.Errorf("webdis.json: Redis at %s:%d, want redis-proxy:%d", wd.RedisHost, wd.RedisPort, proxyPort)
	}

	// envoy-filter.yaml: the filter, partitioned.
	c, err := envoyconf.Load(filepath.Join(dir, "envoy-filter.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(c.Listeners[0].Filter.PluginConfig)
	if err != nil {
		t.Fatalf("envoy-filter.yaml: the filter's configuration: %v", err)
	}
	if cfg.Redis == nil || cfg.Redis.Partitions < 2 {
		t.Errorf("envoy-filter.yaml: redis.partitions %v: a hot rule's keys would all be on one node", cfg.Redis)
	}
	servicePorts := map[string]int{"upstream": 8080, "webdis": wd.HTTPPort}
	for name, cl := range c.Clusters {
		host, p, err := net.SplitHostPort(cl.Address)
		if err != nil {
			t.Fatal(err)
		}
		if want, ok := servicePorts[host]; !ok || p != strconv.Itoa(want) {
			t.Errorf("envoy-filter.yaml: cluster %s points at %s, want a compose service on its port (%v)", name, cl.Address, servicePorts)
		}
	}
}
