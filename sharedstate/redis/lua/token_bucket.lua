-- token_bucket.lua: algorithms.TokenBucket. State: hash {v = "17", t = tokens, l = last}.
return bucket('17', 't', false)
