module github.com/ratelimit-wasm/ratelimit

go 1.26.0

require (
	github.com/dchest/siphash v1.2.3
	github.com/go-json-experiment/json v1.27.2
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	github.com/stretchr/testify v1.12.1
	github.com/tetratelabs/proxy-wasm-go-sdk v0.24.0
	golang.org/x/time v0.16.0
)

require (
	github.com/tetratelabs/wazero v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/text v0.37.0 // indirect
)
