package redis

// AppendEvalSHAAt is AppendEvalSHA with the test-only clock override: the script decides at
// now (Unix ns) instead of Redis' TIME. It exists only in test builds.
func (r *Rule) AppendEvalSHAAt(dst, key []byte, n, now int64) []byte {
	return appendNow(r.AppendEvalSHA(dst, key, n), now)
}

// AppendEvalAt is AppendEval with the test-only clock override.
func (r *Rule) AppendEvalAt(dst, key []byte, n, now int64) []byte {
	return appendNow(r.AppendEval(dst, key, n), now)
}

// AppendEvalSHAItemsAt is the function AppendEvalSHA with the test-only clock override.
func AppendEvalSHAItemsAt(dst []byte, items []Item, now int64) []byte {
	return appendNow(AppendEvalSHA(dst, items), now)
}

// AppendSettleSHAAt is AppendSettleSHA with the test-only clock override.
func AppendSettleSHAAt(dst []byte, s *Settlement, now int64) []byte {
	return appendNow(AppendSettleSHA(dst, s), now)
}
