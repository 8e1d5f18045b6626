package wasmtest

import (
	"fmt"
	"strings"
)

// PerRequestCase is one case of the per-request benchmarks both hosts run
// (BenchmarkGuestPerRequest on wazero, BenchmarkV8GuestPerRequest on V8), so that their figures
// compare case for case.
type PerRequestCase struct {
	Name   string
	Module string // the guest's package, relative to the repository root (as BuildGuest takes)
	// Config is the plugin configuration; a %d in it stands for max_keys.
	Config string
	// MaxKeys is the max_keys the case runs with; 0 means twice the requests sent.
	MaxKeys int
	// SameClient and Clients are the configurations of the two baselines a new-client case
	// runs beside: one client repeating, and a population of returning clients (a %d stands
	// for max_keys). Both are empty for the other cases.
	SameClient, Clients string
}

// BenchRule is rule i of the per-request benchmarks: a token bucket keyed by the client's
// address and the x-tenant header, with key sources before them (such as a const source, for
// rules whose keys differ), and a limit no benchmark reaches.
func BenchRule(i int, key string) string {
	return fmt.Sprintf(`{"name":"r%d","continue":true,"key":[%s{"source":"client_ip"},{"source":"header","name":"x-tenant","default":"-"}],`+
		`"algorithm":"token_bucket","limit":1000000000,"window":"1s"}`, i, key)
}

// PerRequestCases are the per-request benchmarks' cases: the pass-through module, the
// host-call floor (one rule's host calls without its decision), one rule, five rules (on one
// key, and on five distinct keys), and a new client on every request against a table with
// room to spare and against a full one.
//
// The returning clients' rule allows 100,000 per 31 days (a token back every 27 s), so that
// every key stays active between its client's requests: under the other rules' limit a key is
// idle (back at full allowance) a nanosecond after its request, and two returning clients
// with one home slot would take it from each other on every return, each request a new key's
// placement.
func PerRequestCases() []PerRequestCase {
	five, distinct := make([]string, 5), make([]string, 5)
	for i := range five {
		five[i] = BenchRule(i, "")
		distinct[i] = BenchRule(i, fmt.Sprintf(`{"source":"const","value":"%d"},`, i))
	}
	one := `{"rules":[` + BenchRule(0, "") + `]}`
	sized := `{"max_keys":%d,"rules":[` + BenchRule(0, "") + `]}`
	held := strings.Replace(sized, `"limit":1000000000,"window":"1s"`, `"limit":100000,"window":"744h"`, 1)
	return []PerRequestCase{
		{Name: "passthrough", Module: "./wasmhost/testdata/passthrough", Config: `{}`},
		{Name: "hostfloor", Module: "./wasmhost/testdata/hostfloor", Config: `{}`},
		{Name: "hostfloor-new-client", Module: "./wasmhost/testdata/hostfloor", Config: `{"per_client":true,"max_keys":%d}`,
			SameClient: `{}`, Clients: `{"per_client":true,"max_keys":%d}`},
		{Name: "1rule", Module: ".", Config: one},
		{Name: "5rules", Module: ".", Config: `{"rules":[` + strings.Join(five, ",") + `]}`},
		{Name: "5rules-distinct", Module: ".", Config: `{"rules":[` + strings.Join(distinct, ",") + `]}`},
		{Name: "1rule-new-client", Module: ".", Config: sized, SameClient: one, Clients: held},
		{Name: "1rule-new-client-full", Module: ".", Config: sized, MaxKeys: 1000, SameClient: one, Clients: held},
	}
}
