package filtertest

// An AnswerCase is a configuration with global rules whose every script call Redis answers
// alike, with Answer, and the requests to send with what the client must see (played with
// Run, at one instant: the module's host runs on real time). Natively the driver answers each
// callout of the SDK's emulator; against the compiled module a stand-in for webdis does.
type AnswerCase struct {
	Name   string
	Config string
	// Answer is webdis's answer body to every script call, with status 200; its one verb (%s)
	// is the call's id as the call sent it (its last argument).
	Answer string
	Steps  []Step
}

// AnswerCases are the answers of Redis that both drivers check alike.
var AnswerCases = []AnswerCase{
	{
		// A well-formed answer with an absurd retry-after (2^63-1 ns) is clamped to the rule's
		// longest wait (gcra 5 per minute: two minutes) in Retry-After, RateLimit,
		// X-RateLimit-Reset and the deny body, instead of overflowing into
		// "Retry-After: -9223372035".
		Name:   "AbsurdRetryAfterIsClamped",
		Config: GlobalConfig(RedisOpts{}, `[{"name":"g","algorithm":"gcra","limit":5,"window":"1m","scope":"global"}]`),
		Answer: `{"EVALSHA":[1764504000,0,0,%s,0,5,0,9223372036854775807,9223372036854775807,0]}`,
		Steps: []Step{{Want: 429, WantBody: `"retry_after":120`, WantHeaders: map[string]string{
			"retry-after": "120", "ratelimit": `"g";r=0;t=120`, "x-ratelimit-limit": "5", "x-ratelimit-reset": "120"}}},
	},
}
