-- The partition secret of a key prefix and domain (see partition.go): the value under KEYS[1]
-- when it is one (32 lower-case hex digits), else ARGV[1], which is stored there first. The
-- read and the write are one script, so of proxies racing to create the secret one stores it
-- and every one reads that one back; a value that is not a secret (written by something
-- else) is replaced the same way.
local v = redis.call('GET', KEYS[1])
if type(v) == 'string' and #v == 32 and not string.find(v, '[^0-9a-f]') then
  return v
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
