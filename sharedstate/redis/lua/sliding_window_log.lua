-- sliding_window_log.lua: algorithms.SlidingWindowLog, following its doc comment line by line:
-- the timestamp of every admitted event of the last window, oldest first.
--
-- state    a list: the header "p<parameters>", then the absolute timestamps (decimal Unix ns),
--          oldest first; n events admitted together are n equal entries. (A list without the
--          header, all timestamps, is the encoding before parameters were recorded.) It is a
--          list rather than a hash so that dropping expired events (LTRIM) and admitting
--          (RPUSH) touch only the ends, and a denial reads only the entries it needs. Limit is
--          at most 1024 (algorithms.LogLimitCeiling).
--
-- The decoded state is a view, never a copy: {off = index of the first timestamp, count =
-- number of timestamps} reads the list lazily; {mem = C} is a converted key that holds C
-- timestamps equal to the decision time and exists only in the script until it is written.

-- swl_load reads the list at key: the view and the parameters it records, or nil (fresh) for
-- an unreadable header or, without a header, when the rule is not a log (the old encoding is
-- read with the current parameters, as before).
local function swl_load(key, P, count)
  local head = redis.call('LINDEX', key, 0)
  if type(head) == 'string' and string.sub(head, 1, 1) == 'p' then
    local Q = parse_params(string.sub(head, 2))
    if Q == nil or Q.code ~= SW_LOG then
      return nil
    end
    return {off = 1, count = count - 1}, Q
  end
  if P.code ~= SW_LOG then
    return nil
  end
  return {off = 0, count = count}, P
end

local function swl_decide(st, P, n, now_s, now_n, key)
  local L, W = P.limit, P.W
  local count, off, mem = 0, 0, false
  local eff_s, eff_n = now_s, now_n
  local new_s, new_n -- newest stored timestamp
  local dropped, first_s, first_n = 0, nil, nil
  local valid = true
  if st and st.mem then
    -- A converted key: C timestamps equal to tc (at or after now), so eff = max(now, tc) when
    -- C > 0, and now when the log is empty, as for the Go log.
    mem, count = true, st.mem
    new_s, new_n, first_s, first_n = st.tc_s, st.tc_n, st.tc_s, st.tc_n
    if count > 0 and tsless(now_s, now_n, st.tc_s, st.tc_n) then
      eff_s, eff_n = st.tc_s, st.tc_n
    end
  elseif st then
    count, off = st.count, st.off
  end
  if count > 0 and not mem then
    new_s, new_n = ts(redis.call('LINDEX', key, -1))
    if new_s == nil or tsless(MAX_S, MAX_N, new_s, new_n) then
      valid = false
    else
      -- eff = max(now, newest): a stale call is evaluated at newest.
      if tsless(now_s, now_n, new_s, new_n) then
        eff_s, eff_n = new_s, new_n
      end
      -- Drop the leading timestamps t <= eff - W, reading the list in chunks from the front
      -- until the first live one.
      local cut_s, cut_n = tsadd(eff_s, eff_n, -W)
      local i = 0
      while valid and dropped == i and i < count do
        local chunk = redis.call('LRANGE', key, off + i, off + i + 31)
        if #chunk == 0 then
          break
        end
        for _, v in ipairs(chunk) do
          local t_s, t_n = ts(v)
          if t_s == nil then
            valid = false
            break
          end
          if tsless(cut_s, cut_n, t_s, t_n) then
            first_s, first_n = t_s, t_n
            break
          end
          dropped = dropped + 1
        end
        i = i + #chunk
      end
    end
  end
  if not valid then
    -- An unreadable log is a fresh key; it is rewritten from scratch on the next admission.
    count, dropped, eff_s, eff_n = 0, 0, now_s, now_n
  end
  local live = count - dropped
  local new = {eff_s = eff_s, eff_n = eff_n, off = off, dropped = dropped, live = live, n = n,
    rewrite = mem or live == 0 or not valid, had = st ~= nil, valid = valid}

  if n <= 0 or n > L then
    -- unsatisfiable: RetryAfter 0, nothing stored
    local reset = 0
    if live > 0 then
      reset = tsdiff(new_s, new_n, now_s, now_n) + W
    end
    return false, math.max(0, L - live), 0, reset, new
  end

  if live + n > L then
    -- Denied: the k-th oldest live timestamp must leave the window first. The state is not
    -- changed (expired entries stay until the next admission, as in the Go code).
    local k = live + n - L
    local t_s, t_n = first_s, first_n
    if k > 1 and not mem then
      t_s, t_n = ts(redis.call('LINDEX', key, off + dropped + k - 1))
      if t_s == nil then
        t_s, t_n = new_s, new_n
      end
    end
    local retry = tsdiff(t_s, t_n, now_s, now_n) + W
    local reset = tsdiff(new_s, new_n, now_s, now_n) + W
    return false, math.max(0, L - live), retry, reset, new
  end

  return true, L - (live + n), 0, tsdiff(eff_s, eff_n, now_s, now_n) + W, new
end

-- R_old is max(0, L - live) at max(now, newest), which is the conversion instant, and the
-- key is idle when no timestamp is left in the window (SlidingWindowLog.Idle: newest + W <=
-- now). An unreadable log is nil: a fresh key, as the Go code treats a state that does not
-- decode.
local function swl_peek(st, P, now_s, now_n, key)
  local _, R, _, _, new = swl_decide(st, P, 0, now_s, now_n, key)
  if not new.valid then
    return nil
  end
  return R, new.eff_s, new.eff_n, new.live == 0
end

-- A key that consumed C at tc: C entries stamped tc.
local function swl_from(P, C, tc_s, tc_n)
  return {mem = C, tc_s = tc_s, tc_n = tc_n}
end

-- swl_write stores an admission: the expired prefix goes, n copies of eff are appended, and
-- the header records the parameters. A converted, empty or unreadable log is rewritten whole.
local function swl_write(key, P, st, stale)
  local stamp = tsfmt(st.eff_s, st.eff_n)
  local add = {}
  if st.rewrite then
    if st.had or stale then
      redis.call('DEL', key)
    end
    add[1] = 'p' .. P.str
    -- A converted key's C entries are stamped tc, which is eff when C > 0.
    for j = 1, st.live + st.n do
      add[j + 1] = stamp
    end
    redis.call('RPUSH', key, unpack(add))
  else
    -- RPUSH first: the expired prefix and the header are at the front, so the indexes LTRIM
    -- uses do not move, and the first write is one that Redis checks against maxmemory.
    for j = 1, st.n do
      add[j] = stamp
    end
    redis.call('RPUSH', key, unpack(add))
    redis.call('LTRIM', key, st.off + st.dropped, -1)
    redis.call('LPUSH', key, 'p' .. P.str)
  end
end
