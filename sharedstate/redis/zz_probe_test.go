package redis_test

import (
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
)

func TestZZStats(t *testing.T) {
	srv := redistest.Start(t)
	t.Run("d", func(t *testing.T) { runDifferential(t, srv.WebdisURL()) })
	v, _ := srv.Do("INFO", "commandstats")
	t.Logf("%v", v)
	v, _ = srv.Do("INFO", "cpu")
	t.Logf("%v", v)
}
