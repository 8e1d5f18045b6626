// Package e2e holds the end-to-end suite: the product as a user meets it, through real HTTP.
//
// One list of scenarios (scenarios_test.go) runs against two targets:
//
//   - the project's wazero host serving envoy.yaml and e2e/envoy-failure-modes.yaml, with
//     the real .wasm, the echo upstream (package echo) and a private redis-server + webdis
//     (internal/redistest). It always runs in `go test ./...`;
//   - Envoy itself in docker compose (docker-compose.yml), when E2E_ENVOY=1 and a Docker
//     engine answers.
//
// The package has no non-test code besides this comment; the echo upstream lives in
// wasmhost/echo (the emulator's bundled upstream, which `make run` serves too).
package e2e
