#!/bin/sh
# v8-compile-phases.sh MODULE.wasm [STEP ...]
# v8-compile-phases.sh -init MODULE.wasm [init]
#
# What V8 compiles, step by step, when it starts the filter and serves its first requests:
# the 1-rule configuration of BenchmarkV8Start (client_ip and header key, token bucket) and two
# requests with new keys, run by wasmhost/v8/host.js on Node with Envoy's V8 flag
# (--no-liftoff) and V8's compile trace. Envoy's V8 compiles each function on its first call,
# so the bytes compiled in a step are its start-up cost (about 1.1 ms of CPU per KB,
# docs/BENCHMARKS.md); unlike wall time they do not depend on the machine's load. For each step (init = _initialize, vmstart,
# configure, request0, request1) it prints the functions compiled and their summed body
# bytes, and for each STEP named the functions with their sizes. Needs node and wabt's
# wasm-objdump (for the names: build without -s, as `make build` does). With -init the module
# is only instantiated and its _initialize run (a reactor that is not a filter, such as
# wasmhost/testdata/emptyreactor and stdreactor): one step, init.
set -eu
mode=
if [ "$1" = -init ]; then
	mode='"mode":"init",'
	shift
fi
mod=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rule='{\"name\":\"r0\",\"continue\":true,\"key\":[{\"source\":\"client_ip\"},{\"source\":\"header\",\"name\":\"x-tenant\",\"default\":\"-\"}],\"algorithm\":\"token_bucket\",\"limit\":1000000000,\"window\":\"1s\"}'
cat > "$tmp/job.json" <<JOB
{$mode"module":"$(cd "$(dirname "$mod")" && pwd)/$(basename "$mod")","config":"{\"rules\":[$rule]}","workers":1,"phase_markers":true,
 "requests":[{"method":"GET","path":"/api","source":"192.0.2.1:5555","headers":[["x-tenant","acme"]]},
             {"method":"GET","path":"/api","source":"192.0.2.2:5555","headers":[["x-tenant","acme"]]}]}
JOB
wasm-objdump -x -j name "$mod" | sed -n 's/.*func\[\([0-9]*\)\] <\(.*\)>.*/\1 \2/p' > "$tmp/names"
node --no-liftoff --trace-wasm-compilation-times "$root/wasmhost/v8/host.js" < "$tmp/job.json" > "$tmp/trace"
awk -v show=" $* " '
	FILENAME == ARGV[1] { name[$1] = $2; next }
	/^@@PHASE / { step = $2; if (!(step in n)) order[++steps] = step; n[step] += 0; next }
	/^Compiled function / && step != "" {
		split($3, id, "#")
		for (i = 1; i <= NF; i++) if ($i == "bodysize") size = $(i + 1)
		n[step]++; bytes[step] += size
		if (index(show, " " step " ")) list[step] = list[step] sprintf("  %6d %s\n", size, name[id[2]])
	}
	END {
		for (i = 1; i <= steps; i++) printf "%-10s %4d functions %7d bytes\n", order[i], n[order[i]], bytes[order[i]]
		for (i = 1; i <= steps; i++) if (list[order[i]] != "") printf "-- %s\n%s", order[i], list[order[i]]
	}' "$tmp/names" "$tmp/trace"
