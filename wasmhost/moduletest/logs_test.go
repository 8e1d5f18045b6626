package moduletest

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/wasmhost"
	"github.com/ratelimit-wasm/ratelimit/wasmhost/wasmtest"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a log writer the host's VMs may write to at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Every line of a refused configuration carries the level: the filter logs each
// problem as an entry of its own, so none is a bare continuation line in Envoy's log.
func TestInvalidConfigEveryLineHasLevel(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	_, err := wasmhost.New(context.Background(), wasmtest.BuildModule(t), wasmhost.Options{
		VMID: "ratelimit",
		PluginConfig: []byte(`{"rules":[{"name":"a","algorithm":"fixed_window","limit":1,"window":"10"},
			{"name":"b","algorithm":"fixed_window","limit":0,"window":"1s"}]}`),
		SharedData: wasmhost.NewSharedData(),
		LogWriter:  &logs,
	})
	require.Error(t, err)
	var problems int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		require.True(t, strings.HasPrefix(line, "["), "a log line without its level: %q\n%s", line, logs.String())
		if strings.Contains(line, "rules[0].window") || strings.Contains(line, "rules[1].limit") {
			require.Contains(t, line, "[critical]", line)
			problems++
		}
	}
	require.Equal(t, 2, problems, "each problem on a line of its own:\n%s", logs.String())
}

// A configure warning is logged once per process, not once per worker VM.
func TestConfigureWarningOncePerProcess(t *testing.T) {
	t.Parallel()
	d := newWasm(t, `{"rules":[{"name":"ad","algorithm":"adaptive","window":"1s",
		"adaptive":{"min_limit":5,"max_limit":100,"target_latency":"100ms","interval":"200ms"}}]}`,
		wasmOptions{workers: 4})
	n := 0
	for _, e := range d.host.Logs() {
		if strings.Contains(e.Message, "adaptive min_limit 5 is below 50") {
			n++
		}
	}
	require.Equal(t, 1, n, "four worker VMs configured the plugin")
}
