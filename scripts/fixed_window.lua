-- Fixed window: the naive counter, kept so that its boundary burst can be
-- shown and measured. Twin of algorithm/fixed_window.go.
--
-- KEYS[1]  a string "<window index>:<count>"
-- ARGV[1]  now (integer microseconds since the Unix epoch) or "" for TIME
-- ARGV[2]  n, the cost of this request
-- ARGV[3]  limit, the most units admitted per window
-- ARGV[4]  window, in microseconds
-- ARGV[#ARGV]  "peek" on a peek: decide, and write nothing; "refund" on a
--              refund: lower this window's count by n (below); "lease" on a
--              lease, after ARGV[#ARGV-3..#ARGV-1] = back_at, back, want:
--              refund back units if the lease taken at back_at was taken in
--              this window, then take a lease (below and algorithm.Leaser);
--              "atmost" on a partial grant: count the most of n that the
--              window has left (below)
--              "charge" after ARGV[#ARGV-1] = the debt cap: record n past
--              the limit, up to the cap (below and algorithm.Charger)
-- Returns {allowed, remaining, retry_after_us, reset_after_us}; a lease
-- or a partial grant returns {granted, remaining, retry_after_us,
-- reset_after_us, now}.
--
-- Windows are [i*window, (i+1)*window) since the Unix epoch. The window index
-- lives in the value rather than in the key's expiry, so a counter is never
-- carried into the next window even when the caller's clock (WithClock) and
-- the server's expiry disagree.
--
-- Out of memory: the only write is the admission's SET, which a Redis over
-- maxmemory (noeviction) refuses with OOM, as a script's first write, before
-- anything is written. A denial writes nothing and is still answered. Keep
-- any new write after a command Redis refuses when full (see
-- sliding_window_log.lua).
-- (key, peek, refund, lease, atmost, n and now: see preamble.lua)
local limit = ARGV[3] + 0
local window = ARGV[4] + 0
local idx = math.floor(now / window)

local count = 0
local v = redis.call('GET', key)
if v then
  -- Parse strictly; something else wrote any other value: say so rather
  -- than overwrite it.
  local vidx, vcount = string.match(v, '^(%d+):(%d+)$')
  if not vidx or #v > 40 then
    return redis.error_reply('WRONGTYPE ' .. key .. ' does not hold a fixed window counter')
  end
  vidx, vcount = vidx + 0, vcount + 0
  -- Time never runs backwards for one key: a caller whose clock is behind the
  -- newest window counted (WithClock skew) is judged at that window's start,
  -- rather than reopening an older window with a fresh count.
  if vidx > idx then
    idx = vidx
    now = idx * window
  end
  if vidx == idx then count = vcount end
end
local window_end = (idx + 1) * window

local back = 0
if refund then
  back = n
elseif lease and math.floor(ARGV[#ARGV - 3] / window) == idx then
  -- A lease's units go back only to the window it was taken in.
  back = ARGV[#ARGV - 2] + 0
end
if back > 0 then
  -- Only a count of the current window is lowered: a key whose count
  -- belongs to an earlier window no longer limits anything, and the refund
  -- leaves it alone. The window is kept at a count of 0, so that a clock
  -- behind still cannot reopen an earlier one.
  if v and count > 0 then
    count = count - math.min(back, count)
    redis.call('SET', key, string.format('%d:%d', idx, count),
      'PX', string.format('%d', math.ceil((window_end - now) / 1000)))
  end
end
if refund then
  local reset = 0
  if count > 0 then reset = window_end - now end
  return {1, math.max(0, limit - count), 0, reset}
end

if charge then
  -- Charge (algorithm.Charger): n more units in this window whatever the
  -- limit, as many as keep its count within limit + max_debt
  -- (ARGV[#ARGV-1], negative: the limit), at most 2^53; the reply's third
  -- integer is the units cut off. A debt left when the window turns is
  -- forgiven, as every count is.
  local max_debt = ARGV[#ARGV - 1] + 0
  if max_debt < 0 then max_debt = limit end
  local ceiling = limit + max_debt
  if ceiling > 9007199254740992 then ceiling = 9007199254740992 end
  local k = math.min(n, math.max(0, ceiling - count))
  if k > 0 then
    count = count + k
    redis.call('SET', key, string.format('%d:%d', idx, count),
      'PX', string.format('%d', math.ceil((window_end - now) / 1000)))
  end
  local reset = 0
  if count > 0 then reset = window_end - now end
  return {1, math.max(0, limit - count), n - k, reset}
end

local granted = n
if lease then
  -- The fair share: at most half of what the window has left, unless n
  -- alone needs more; never more than want (see algorithm.Leaser).
  local want = ARGV[#ARGV - 1] + 0
  local available = math.max(0, limit - count)
  if want == 0 then return {0, available, 0, 0, now} end
  granted = lease_units(n, limit, available, want)
  n = granted
end

if atmost then
  -- A partial grant (algorithm.Granter): the most of n the window has
  -- left, decided as a request of that cost; none, as a request of 1.
  granted = math.min(n, math.max(0, limit - count))
  n = math.max(granted, 1)
end

-- n <= limit - count, not count + n <= limit: at a limit of 2^53 the sum
-- can be 2^53 + 1, which a double rounds down to 2^53.
if n <= limit - count then
  if not peek then
    redis.call('SET', key, string.format('%d:%d', idx, count + n),
      'PX', string.format('%d', math.ceil((window_end - now) / 1000)))
  end
  if lease or atmost then return {granted, limit - count - n, 0, window_end - now, now} end
  return {1, limit - count - n, 0, window_end - now}
end

local reset = 0
if count > 0 then reset = window_end - now end
local retry = window_end - now
if n > limit then
  -- Never passable: say when the key is full again (or a whole window).
  retry = reset
  if retry == 0 then retry = window end
end
-- Remaining is never negative, even when a limiter with a larger limit
-- shares this key.
if lease or atmost then return {0, math.max(0, limit - count), retry, reset, now} end
return {0, math.max(0, limit - count), retry, reset}
