-- window.lua: clock alignment shared by fixed_window and the sliding window counter.

-- window_start returns start(now) = now - (now mod W) as a pair, for a window of wms whole
-- milliseconds. now mod W is computed exactly from the millisecond count, which is below 2^53:
-- now mod W = ((s*1000 + floor(ns/1e6)) mod wms)*1e6 + ns mod 1e6.
local function window_start(now_s, now_n, wms)
  local now_ms = now_s * 1000 + math.floor(now_n / 1000000)
  local r = (now_ms % wms) * 1000000 + now_n % 1000000
  return tsadd(now_s, now_n, -r)
end
