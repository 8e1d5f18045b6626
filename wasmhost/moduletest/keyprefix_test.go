package moduletest

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimit-wasm/ratelimit/internal/redistest"
	"github.com/stretchr/testify/require"
)

// documentedACL returns the Redis ACL of docs/global-limits.md's redis.conf line (the one
// TestACLAllowsExactlyTheScriptsCommands holds to the scripts' commands) for the key prefix
// prefix and the password password: its key pattern ~rl:* made ~<prefix>:*.
func documentedACL(t *testing.T, prefix, password string) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/global-limits.md")
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^user default (.*)$`).FindSubmatch(doc)
	require.NotNil(t, line, "docs/global-limits.md has no redis.conf user line")
	fields := strings.Fields(string(line[1]))
	require.Contains(t, fields, "~rl:*")
	require.Contains(t, fields, ">SECRET")
	for i, f := range fields {
		switch f {
		case "~rl:*":
			fields[i] = "~" + prefix + ":*"
		case ">SECRET":
			fields[i] = ">" + password
		}
	}
	return fields
}

// TestGlobalWasmKeyPrefix: with a key_prefix that is a Redis Cluster hash tag, "{app}", every
// key the module writes (a client's key, the rule's key set and overflow key, the partition
// secret) starts with "{app}:", so behind the documented least-privilege Redis user with the
// key pattern ~{app}:* and webdis' ACL every request is decided by Redis, in both key layouts,
// and none falls to redis.failure_mode ("deny", which would deny the first request).
func TestGlobalWasmKeyPrefix(t *testing.T) {
	t.Parallel()
	const prefix = "{app}"
	rules := `[{"name":"g","key":[{"source":"header","name":"x-user"}],"algorithm":"fixed_window",
		"limit":2,"window":"1h","scope":"global","max_keys":1}]`
	for _, parts := range []int{1, 4} {
		for _, acl := range []bool{true, false} {
			t.Run("partitions "+strconv.Itoa(parts)+" acl "+strconv.FormatBool(acl), func(t *testing.T) {
				t.Parallel()
				var opts redistest.Options
				if acl {
					opts = redistest.Options{
						RedisArgs: append([]string{"--user", "default"}, documentedACL(t, prefix, "s3cret")...),
						Webdis: map[string]any{"redis_auth": "s3cret", "acl": []any{
							map[string]any{"disabled": []string{"*"}},
							map[string]any{"enabled": []string{"EVALSHA", "EVAL"}},
						}},
					}
				}
				srv := redistest.StartWith(t, opts)
				h := newGlobalHost(t, globalConfig(redisOpts{KeyPrefix: prefix, Partitions: parts}, rules), srv.WebdisURL(), 1)
				// a has the rule's one live key (per partition), b is on its own or the overflow
				// key: each is admitted twice and then denied.
				for _, u := range []string{"a", "b"} {
					for i, want := range []int{0, 0, 429} {
						o, _ := doTimed(t, h, hdr("x-user", u))
						require.Equalf(t, want, o.Status, "user %s, request %d", u, i+1)
					}
				}
				requireNoRedisFailures(t, h)
				if acl {
					return // the user may not list keys; the ACL has admitted every one
				}
				keys := srv.Keys()
				for _, k := range keys {
					require.Truef(t, strings.HasPrefix(k, prefix+":"), "key %q does not start with %q", k, prefix+":")
				}
				if parts == 1 {
					require.Contains(t, keys, "{app}:{rl}:g:1:a")
					require.Contains(t, keys, "{app}:{rl}:g:#keys")
				} else {
					require.Contains(t, keys, "{app}:{rl}:#partition-secret")
					require.Condition(t, func() bool {
						for _, k := range keys {
							if regexp.MustCompile(`^\{app\}:\{rl:g:[0-3]\}:1:a$`).MatchString(k) {
								return true
							}
						}
						return false
					}, "a's key in its partition, keys %q", keys)
				}
			})
		}
	}
}
