#!/usr/bin/env bash
# scripts/run.sh: serve traffic through the rate-limit filter, configured by envoy.yaml. `make
# run` builds build/ratelimit.wasm and then runs this.
#
#   - When a Docker engine answers (docker info), it starts e2e/docker-compose.yml: Envoy with
#     the module and envoy.yaml, a second Envoy sharing the same Redis, the echo upstream,
#     Redis and webdis.
#   - Otherwise it serves the same envoy.yaml, on the same ports, with the project's own
#     wazero host (wasmhost/cmd/ratelimit-host) and its bundled echo upstream; redis-server and webdis
#     are started on loopback ports when they are installed. Without them, the global rule
#     follows its redis.failure_mode.
#
# RATELIMIT_RUN=wazero (or docker) forces a mode. Ctrl-C stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."

WASM=build/ratelimit.wasm
PROXY=http://127.0.0.1:10000   # envoy.yaml: listener port 10000
ADMIN=http://127.0.0.1:9901    # envoy.yaml: admin port 9901
mode=${RATELIMIT_RUN:-auto}

if [ ! -f "$WASM" ]; then
  echo "run.sh: $WASM is missing; build it with 'make build' ('make run' does both)." >&2
  exit 1
fi

# wait_ready URL SECONDS [PID]: poll URL until it answers 200; give up after SECONDS or when
# PID (the process that should answer) has exited.
wait_ready() {
  local url=$1 secs=$2 pid=${3:-} i
  for ((i = 0; i < secs * 10; i++)); do
    if curl -fsS -o /dev/null --max-time 1 "$url" 2>/dev/null; then
      return 0
    fi
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      return 1
    fi
    sleep 0.1
  done
  return 1
}

# free_port START: the first loopback TCP port from START on that nothing accepts on.
free_port() {
  local p=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do
    p=$((p + 1))
  done
  echo "$p"
}

banner() {
  cat <<EOF

ratelimit-wasm is serving envoy.yaml ($1)
  proxy    $PROXY
  metrics  $ADMIN/stats/prometheus     (the filter's: grep ratelimit_)
  ready    $ADMIN/ready
$2
Routes (envoy.yaml) and their limits:
  GET  /api/...       public-api  5 requests per client IP, one more every 2 s (token bucket)
  POST /login         login       per client IP (GCRA), and 3 a minute per x-login-user (sliding log)
  GET  /internal/...  internal    not rate limited: the filter is disabled on this route
  GET  /global/...    global      5 a minute per x-api-key, counted in Redis across proxies
  anything else       default     a shadow limit: measured in metrics, never enforced

See a 429 with its headers (the 6th request is denied):
  for i in \$(seq 6); do curl -si $PROXY/api/items | grep -iE '^(HTTP/|retry-after|ratelimit)|rate_limited'; echo; done

Then wait the retry-after seconds and try again, or look at the counters:
  curl -s $ADMIN/stats/prometheus | grep ^ratelimit_public_api

Ctrl-C stops everything.
EOF
}

have_compose() {
  docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1
}

compose() {
  if docker compose version >/dev/null 2>&1; then
    docker compose -p ratelimit-wasm -f e2e/docker-compose.yml "$@"
  else
    docker-compose -p ratelimit-wasm -f e2e/docker-compose.yml "$@"
  fi
}

if [ "$mode" = auto ]; then
  mode=wazero
  if command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; then
    if have_compose; then
      mode=docker
    else
      echo "run.sh: a Docker engine answers but docker compose is not installed; using the wazero host."
    fi
  fi
fi

if [ "$mode" = docker ]; then
  echo "run.sh: Docker engine found: Envoy, a second Envoy, the echo upstream, Redis and webdis via e2e/docker-compose.yml"
  down() {
    trap - EXIT INT TERM
    echo
    echo "run.sh: stopping the compose services..."
    compose down --remove-orphans --timeout 5 || true
  }
  trap down EXIT
  trap 'exit 130' INT TERM
  compose up --build --detach
  if ! wait_ready "$ADMIN/ready" 60; then
    compose logs --tail 50 envoy || true
    echo "run.sh: Envoy did not become ready on $ADMIN/ready" >&2
    exit 1
  fi
  banner "Envoy in docker compose" "  second Envoy (same Redis for the global rule): http://127.0.0.1:10001, admin http://127.0.0.1:9902
  Redis-down failure modes (e2e/envoy-failure-modes.yaml): ports 10010 (allow), 10011 (deny), 10012 (local)
"
  # Follow Envoy's log (access log lines included) until Ctrl-C; the EXIT trap then stops
  # and removes every container.
  compose logs --follow --tail 0 envoy envoy2
  exit 0
fi

# The wazero host. Every process started here is recorded and stopped by the EXIT trap, so
# that Ctrl-C (or any failure) leaves nothing running.
echo "run.sh: no Docker engine: serving envoy.yaml with the project's wazero host (wasmhost/cmd/ratelimit-host)"
tmp=$(mktemp -d)
pids=()
cleanup() {
  trap - EXIT INT TERM
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
  echo
  echo "run.sh: stopped."
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The first build compiles the emulator module's dependencies (wazero, Envoy's API protos:
# about a minute on 2 cores); -v names each package as it is compiled, so the wait shows
# progress. Later builds come from Go's build cache and print nothing.
echo "run.sh: building the wazero host (./wasmhost/cmd/ratelimit-host); the first build takes about a minute:"
go build -v -o build/ratelimit-host ./wasmhost/cmd/ratelimit-host 2>&1 | sed -u 's/^/  building /'
echo "run.sh: host built."

# Same ports as envoy.yaml, but on the loopback interface only: unlike a container, a local
# process bound to 0.0.0.0 would be reachable from the network. -echo serves the bundled echo
# upstream in place of the "upstream" cluster; two workers, like Envoy's --concurrency 2 in
# e2e/docker-compose.yml, so two VMs share the local counters.
args=(-envoy envoy.yaml -wasm "$WASM" -echo -bind 127.0.0.1 -workers 2)
if command -v redis-server >/dev/null 2>&1 && command -v webdis >/dev/null 2>&1; then
  redis_port=$(free_port 16379)
  webdis_port=$(free_port $((redis_port + 1000)))
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" --daemonize no &
  pids+=($!)
  cat >"$tmp/webdis.json" <<EOF
{"redis_host": "127.0.0.1", "redis_port": $redis_port, "http_host": "127.0.0.1",
 "http_port": $webdis_port, "threads": 1, "pool_size": 4, "daemonize": false, "database": 0,
 "verbosity": 1, "logfile": "$tmp/webdis.log",
 "acl": [{"disabled": ["*"]}, {"enabled": ["EVALSHA", "EVAL", "PING"]}]}
EOF
  webdis "$tmp/webdis.json" &
  pids+=($!)
  if ! wait_ready "http://127.0.0.1:$webdis_port/PING" 10 "${pids[-1]}"; then
    echo "run.sh: webdis did not answer on 127.0.0.1:$webdis_port; see $tmp/webdis.log" >&2
    cat "$tmp/webdis.log" "$tmp/redis.log" >&2 2>/dev/null || true
    exit 1
  fi
  args+=(-cluster "webdis=127.0.0.1:$webdis_port")
  redis_note="  redis    redis-server on 127.0.0.1:$redis_port, webdis (cluster \"webdis\") on 127.0.0.1:$webdis_port
"
else
  # Nothing listens on this port, so every Redis call fails the way it does in Envoy when the
  # webdis cluster has no healthy host.
  dead=$(free_port 17379)
  args+=(-cluster "webdis=127.0.0.1:$dead")
  echo "run.sh: redis-server and webdis are not installed (apt-get install redis-server webdis):"
  echo "        the global rule follows its redis.failure_mode (\"local\" in envoy.yaml: counted on this proxy alone)."
  redis_note="  redis    not running: global rules use their failure mode
"
fi

build/ratelimit-host "${args[@]}" &
host_pid=$!
pids+=($host_pid)
if ! wait_ready "$ADMIN/ready" 30 "$host_pid"; then
  echo "run.sh: the wazero host did not become ready on $ADMIN/ready" >&2
  exit 1
fi
banner "wazero host" "$redis_note"
wait "$host_pid"
