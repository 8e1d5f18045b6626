-- window.lua: clock alignment and settlement shared by fixed_window and the sliding window
-- counter.

-- window_start returns start(now) = now - (now mod W) as a pair, for a window of wms whole
-- milliseconds. now mod W is computed exactly from the millisecond count, which is below 2^53:
-- now mod W = ((s*1000 + floor(ns/1e6)) mod wms)*1e6 + ns mod 1e6.
local function window_start(now_s, now_n, wms)
  local now_ms = now_s * 1000 + math.floor(now_n / 1000000)
  local r = (now_ms % wms) * 1000000 + now_n % 1000000
  return tsadd(now_s, now_n, -r)
end

-- aligned reports whether a stored window start is a multiple of the window, as every start
-- the scripts write is. A start that is not (a key in the encoding before parameters were
-- recorded, read under a changed window, or a corrupt one) does not decode: the Go windows
-- treat it as a fresh key, and the roll logic relies on aligned starts.
local function aligned(ws_s, ws_n, wms)
  local a_s, a_n = window_start(ws_s, ws_n, wms)
  return a_s == ws_s and a_n == ws_n
end

-- settle_counts is algorithms.settleCount: a settlement of delta on a window's count c and carry
-- d (the part of c ended windows charged), for a reservation counted in an ended window or not.
-- It also returns what the carry did not take of an ended window's refund.
local function settle_counts(c, d, delta, ended, ceil)
  if delta > 0 then
    c = math.min(c + delta, ceil)
    if ended then
      d = math.min(d + delta, c)
    end
    return c, d, 0
  elseif not ended then
    c = math.max(c + delta, 0)
    return c, math.min(d, c), 0
  end
  local x = math.min(-delta, d)
  return c - x, d - x, -delta - x
end
