# The filter is one .wasm file: build/ratelimit.wasm. `make test` is what CI runs; `make run`
# serves traffic through the filter locally.
GO      ?= go
WASM    := build/ratelimit.wasm
# Packages that are part of the filter and must also compile (and vet) for wasip1.
WASM_PKGS := . ./abi/... ./algorithms/... ./filter/... ./sharedstate/...
# Three modules joined by go.work: the product (the root: what the .wasm is built from), the
# Envoy emulator and its tools (wasmhost/), and the end-to-end scenarios (e2e/).
ALL_PKGS := ./... ./wasmhost/... ./e2e/...
# go test starts the packages' test runs in the order given; the longest go first, so that the
# short ones fill the other lanes rather than a long one ending the run alone. None of the three
# links go-control-plane, so from an empty build cache they run while it compiles.
TEST_PKGS := ./wasmhost/moduletest/ ./sharedstate/redis/ ./filter/ $(ALL_PKGS)
# The wasip1 packages the tests build besides the filter (wasmhost/wasmtest): the test guests,
# and testing for wasmhost/cmd/wasmbench's test binary. make test compiles them (go build of
# several packages links none) beside the native compiles, not while the tests wait.
TEST_GUESTS := ./wasmhost/placeholder/module $(addprefix ./wasmhost/testdata/,abiguest hostfloor passthrough) testing
# Every go command here runs with -trimpath: what it compiles (packages, vet results, test
# binaries) is then cached by content alone, not by the directory of the clone, so a fresh clone
# reuses a warm build cache, and the .wasm does not record where it was built.
export GOFLAGS := -trimpath $(GOFLAGS)
GO_SRCS := $(shell find . -name '*.go' -not -name '*_test.go' -not -path './build/*' -not -path './wasmhost/*' -not -path './e2e/*') go.mod go.sum

.PHONY: build test go-test gofmt vet vet-wasip1 vet-wasip1-files build-vet-wasip1 check check-shipped run bench clean e2e-envoy

build: $(WASM)

$(WASM): $(GO_SRCS)
	@mkdir -p build
	@echo "building $(WASM) (the first build also compiles Go's standard library for wasip1)"
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o $@ .
	@ls -l $@

gofmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet: gofmt vet-wasip1
	$(GO) vet $(ALL_PKGS)

# The wasip1 vet compiles the packages for their type information as the build does, so it
# finds them in Go's build cache.
vet-wasip1:
	GOOS=wasip1 GOARCH=wasm $(GO) vet $(WASM_PKGS)

# What only wasip1 builds: the non-test files of each package whose files differ on wasip1
# (abi's exports and host calls), vetted for wasip1 as one package per directory. The rest is
# the same code that go test -vet=all vets natively, and the tests' wasip1 dependencies (the
# SDK's proxytest, wazero, testify's net/http) would cost more to compile and vet than the
# whole native vet of the product; `make vet` still vets everything for wasip1.
vet-wasip1-files:
	@for pkg in $$( { $(GO) list -f '{{.ImportPath}} {{.GoFiles}}' $(WASM_PKGS); \
	    GOOS=wasip1 GOARCH=wasm $(GO) list -f '{{.ImportPath}} {{.GoFiles}}' $(WASM_PKGS); } | \
	    sort | uniq -u | cut -d' ' -f1 | uniq); do \
	  ( cd "$$($(GO) list -f '{{.Dir}}' $$pkg)" && \
	    files=$$(GOOS=wasip1 GOARCH=wasm $(GO) list -f '{{join .GoFiles " "}}' .) && \
	    echo "GOOS=wasip1 GOARCH=wasm $(GO) vet $$files  # in $$pkg" && \
	    GOOS=wasip1 GOARCH=wasm $(GO) vet $$files ) || exit 1; \
	done

# Checks an Envoy bootstrap (or a plugin configuration file) before a deploy (Envoy's API
# rules, every filter configuration, rules against the listener's routes, warnings):
#   make check ENVOY=path/to/envoy.yaml
# The command exits 1 on an error and 2 on a usage error; make then exits 2, its status for
# any failed recipe, and names the command's status on its last line ("Error 1"). A CI job
# that needs the command's own status runs `go run ./wasmhost/cmd/ratelimit-host check FILE`.
# With PREVIOUS=deployed.yaml it also says what the change does to each rule's live state
# (kept, converted without grant, reset: docs/config-changes.md):
#   make check PREVIOUS=old.yaml ENVOY=new.yaml
# With STRICT=1 it passes -strict, so warnings (and, with PREVIOUS, resets) fail it too:
#   make check ENVOY=new.yaml STRICT=1
ENVOY ?= envoy.yaml
PREVIOUS ?=
STRICT ?=
check:
	$(GO) run ./wasmhost/cmd/ratelimit-host check $(if $(STRICT),-strict) $(if $(PREVIOUS),-previous $(PREVIOUS)) $(ENVOY)

# The bootstraps the repository ships must pass the check, warnings included.
SHIPPED_ENVOY := envoy.yaml e2e/envoy-failure-modes.yaml e2e/redis-cluster/envoy-filter.yaml
check-shipped:
	$(GO) run ./wasmhost/cmd/ratelimit-host check -strict $(SHIPPED_ENVOY)

# `make test` runs two chains of go commands at once on packages the other chain does not
# compile, so that on an empty build cache one compiles while the other waits on a long
# compile: the .wasm, the wasip1 vet of the files only wasip1 builds (vet-wasip1-files), the
# test guests' wasip1 packages; and go test (native). Tests build the .wasm themselves when it
# is missing or stale, so `go test ./...` alone works too.
# go test -p 3: three actions at a time on two cores, so that while the two longest test runs
# (mostly waiting on Redis and webdis) go on, the other packages still compile and link; with
# -p 2 those two held both slots.
# go test -vet=all runs every analyzer of go vet (what `make vet` runs natively) on each
# package and its tests before running them, in the command that compiles and runs them, so
# the analyses, compiles and test runs of different packages overlap.
# -parallel is left to the packages: wasmhost/moduletest runs four tests at a time (a few of its
# parallel tests sleep for seconds on Redis' clock) and sharedstate/redis eight (its round trips
# then share wake-ups), each in its TestMain; a -parallel here would override both.
# -ldflags=-w: the test binaries are linked without DWARF, which only a debugger reads (stack
# traces come from the binary's own tables); linking the 20 test binaries then takes about 28
# CPU-s instead of 38, what every run pays however warm its build cache.
# Packages run in parallel: the shaping, adaptive and failure-mode tests run in the host's
# virtual time, so no pass/fail test depends on how fast a timer fires on a loaded machine.
# The shipped bootstraps are checked by envoycheck's TestShippedConfigsPass, for errors and
# warnings, as check-shipped checks them.
test: gofmt
	@$(MAKE) --no-print-directory -j2 go-test build-vet-wasip1

build-vet-wasip1: build
	@$(MAKE) --no-print-directory vet-wasip1-files
	GOOS=wasip1 GOARCH=wasm $(GO) build $(TEST_GUESTS)

go-test:
	$(GO) test -p 3 -count=1 -vet=all -ldflags=-w -timeout 30m $(TEST_PKGS)

# Builds the filter and serves traffic through it: in Envoy via docker compose when a Docker
# engine answers, otherwise in the project's own wazero host.
run: build
	@./scripts/run.sh

# The e2e scenarios against real Envoy in docker compose (needs a Docker engine); `make test`
# runs the same scenarios against the wazero host.
e2e-envoy: build
	E2E_ENVOY=1 $(GO) test -count=1 -run TestEnvoy -v ./e2e/

bench: build
	$(GO) test -run '^$$' -bench . -benchmem -count=1 $(ALL_PKGS)

clean:
	rm -rf build
