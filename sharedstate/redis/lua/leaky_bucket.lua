-- leaky_bucket.lua: the admission meter of algorithms.LeakyBucket (MaxDelay == 0; the shaper
-- is local only). State: hash {v = "33", lv = level, l = last}.
return bucket('33', 'lv', true)
