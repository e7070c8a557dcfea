-- Sliding-window counter: the previous aligned window's count, weighted by
-- the share of it the sliding window still covers, plus the current one's.
-- Twin of algorithm/sliding_window_counter.go.
--
-- KEYS[1]  a string "<window index>:<prev>:<cur>": cur units admitted in
--          window index, prev in the window before it
-- ARGV[1]  now (integer microseconds since the Unix epoch) or "" for TIME
-- ARGV[2]  n, the cost of this request
-- ARGV[3]  limit, the most units the estimate may reach
-- ARGV[4]  window, in microseconds
-- ARGV[#ARGV]  "peek" on a peek: decide, and write nothing; "refund" on a
--              refund: take n off the counts, newest first (below); "lease"
--              on a lease, after ARGV[#ARGV-3..#ARGV-1] = back_at, back,
--              want: take back off the count of the window back_at is in
--              (below), then take a lease (below and algorithm.Leaser);
--              "atmost" on a partial grant: count the most of n that the
--              estimate has room for (below)
--              "charge" after ARGV[#ARGV-1] = the debt cap: record n past
--              the limit, up to the cap (below and algorithm.Charger)
-- Returns {allowed, remaining, retry_after_us, reset_after_us}; a lease
-- or a partial grant returns {granted, remaining, retry_after_us,
-- reset_after_us, now}.
--
-- Windows are [i*window, (i+1)*window) since the Unix epoch. e microseconds
-- into window i the estimate of the units admitted in [now - window, now) is
-- prev*(window - e)/window + cur, and a request of cost n passes iff
-- estimate + n <= limit. cur + n and limit are integers, so that is
-- ceil(prev*(window - e)/window) + cur + n <= limit, exactly: the weighted
-- count is rounded up, never down. The product prev*(window - e) reaches
-- 2^53 * 3.2e14 (a limit of 2^53, a window of ten years), far beyond the
-- 2^53 a double holds exactly, so it goes through muldiv below.
local MAX = 9007199254740992 -- 2^53

-- muldiv returns floor(a*b/c) and a*b mod c, exactly, for integers
-- 0 <= a, b <= 2^53 and 1 <= c <= 2^53 whose quotient is at most 2^53.
local function muldiv(a, b, c)
  local p = a * b
  if p < MAX then
    -- The rounded product is below 2^53 only when the product is, and then
    -- it is exact; math.fmod is exact on doubles.
    local r = math.fmod(p, c)
    return (p - r) / c, r
  end
  -- a*b = qa*c*b + ra*b with ra = a mod c. ra*b is built bit by bit of b,
  -- from the top, as q*c + r with 0 <= r < c: r is doubled, and ra added,
  -- by comparing with c - r rather than summing, so that r never leaves
  -- [0, c) and every value stays an exact integer within 2^53 (q only grows
  -- to the quotient). At most 54 rounds.
  local ra = math.fmod(a, c)
  local q, r, bit, rest = 0, 0, 1, b
  while bit * 2 <= b do bit = bit * 2 end
  while bit >= 1 do
    q = q * 2
    if r >= c - r then
      r, q = r - (c - r), q + 1
    else
      r = r + r
    end
    if rest >= bit then
      rest = rest - bit
      if r >= c - ra then
        r, q = r - (c - ra), q + 1
      else
        r = r + ra
      end
    end
    bit = bit / 2
  end
  return (a - ra) / c * b + q, r
end

-- field parses a decimal field of a stored value (digits only, matched
-- below): at most 2^53 and without leading zeros (the script writes none),
-- or nil. The digits are compared as strings: converted, 2^53 + 1 would
-- round to 2^53.
local function field(s)
  if #s > 16 or (#s == 16 and s > '9007199254740992') or (#s > 1 and string.byte(s) == 48) then
    return nil
  end
  return s + 0
end

-- (key, peek, refund, lease, atmost, n and now: see preamble.lua)
local limit = ARGV[3] + 0
local window = ARGV[4] + 0
local e = math.fmod(now, window)
local idx = (now - e) / window

local prev, cur = 0, 0
local v = redis.call('GET', key)
if v then
  -- Parse strictly; something else wrote any other value: say so rather
  -- than overwrite it. Counts above 2^53, or a window starting beyond 2^53
  -- microseconds, are not ours either (muldiv needs them within 2^53).
  local vidx, vprev, vcur = string.match(v, '^(%d+):(%d+):(%d+)$')
  if vidx then
    vidx, vprev, vcur = field(vidx), field(vprev), field(vcur)
  end
  if not (vidx and vprev and vcur) or vidx > (MAX - math.fmod(MAX, window)) / window then
    return redis.error_reply('WRONGTYPE ' .. key .. ' does not hold a sliding window counter')
  end
  -- Time never runs backwards for one key: a caller whose clock is behind the
  -- newest window counted (WithClock skew) is judged at that window's start,
  -- rather than reopening an older window.
  if vidx > idx then
    idx, now, e = vidx, vidx * window, 0
  end
  if vidx == idx then
    prev, cur = vprev, vcur
  elseif vidx == idx - 1 then
    prev = vcur
  end
end

-- keep writes counts lowered by a refund or a lease's hand-back. The key
-- keeps its window index (so that a clock behind still cannot reopen an
-- earlier window) until its counts weigh nothing. It is made only in the
-- modes that call it (a charge, a refund, a lease), not on every decision.
local keep
if charge or refund or lease then
  keep = function()
    local ttl = window - e
    if cur > 0 then ttl = ttl + window end
    redis.call('SET', key, string.format('%d:%d:%d', idx, prev, cur),
      'PX', string.format('%d', math.ceil(ttl / 1000)))
  end
end

-- A charge (algorithm.Charger) adds n to the current window's count
-- whatever the limit, as much as keeps it within limit + max_debt
-- (ARGV[#ARGV-1], negative: the limit), at most 2^53; the reply (below)
-- has the units cut off as its third integer.
local cut = 0
if charge then
  local max_debt = ARGV[#ARGV - 1] + 0
  if max_debt < 0 then max_debt = limit end
  local ceiling = limit + max_debt
  if ceiling > MAX then ceiling = MAX end
  local k = math.min(n, math.max(0, ceiling - cur))
  cut = n - k
  if k > 0 then
    cur = cur + k
    keep()
  end
end

if refund and v then
  -- Refund: n comes off the current window's count first, then what is
  -- left of it off the previous window's, which still weighs; a count two
  -- windows old weighs nothing and is not touched.
  local k = math.min(n, cur)
  cur = cur - k
  prev = prev - math.min(n - k, prev)
  keep()
end

-- A lease first gives back the earlier lease's unspent units, to the count
-- of the window it was taken in only (that is where they were charged):
-- the current window's, or the previous one's while it still weighs. A
-- lease two or more windows old weighs nothing and is not given back.
local lowered = false
if lease then
  local back = ARGV[#ARGV - 2] + 0
  if v and back > 0 then
    lowered = true
    local back_at = ARGV[#ARGV - 3] + 0
    local bidx = (back_at - math.fmod(back_at, window)) / window
    if bidx == idx then
      cur = cur - math.min(back, cur)
    elseif bidx == idx - 1 then
      prev = prev - math.min(back, prev)
    end
  end
end

-- x is how much of window idx-1 is still inside [now - window, now), 1 to
-- window microseconds; weighted is prev*x/window rounded up.
local x = window - e
local weighted, rem = muldiv(prev, x, window)
if rem > 0 then weighted = weighted + 1 end
-- room may be negative when a limiter with a larger limit shares this key;
-- it is tested before the subtraction so that room - weighted stays exact.
local room = limit - cur

-- The key is back at full capacity at the end of the next window while cur
-- weighs, else at the end of this one while prev does.
local reset = 0
if cur > 0 then
  reset = 2 * window - e
elseif prev > 0 then
  reset = x
end
-- Remaining is never negative, even when a limiter with a larger limit
-- shares this key.
local remaining = 0
if room > weighted then remaining = room - weighted end
if refund then return {1, remaining, 0, reset} end
if charge then return {1, remaining, cut, reset} end

-- The lowered counts are written once: by the admission's SET below, or
-- by keep when nothing is admitted.
local granted = n
if lease then
  -- The fair share: at most half of what the key has left, unless n alone
  -- needs more; never more than want (see algorithm.Leaser).
  local want = ARGV[#ARGV - 1] + 0
  if want == 0 then
    if lowered then keep() end
    return {0, remaining, 0, 0, now}
  end
  granted = lease_units(n, limit, remaining, want)
  n = granted
end

if atmost then
  -- A partial grant (algorithm.Granter): the most of n the estimate has
  -- room for, decided as a request of that cost; none, as a request of 1.
  granted = math.min(n, remaining)
  n = math.max(granted, 1)
end

if n <= limit and room >= 0 and n <= room - weighted then
  -- The count weighs until the end of the next window: the key is full again
  -- 2*window - e from now, and expires then.
  if not peek then
    redis.call('SET', key, string.format('%d:%d:%d', idx, prev, cur + n),
      'PX', string.format('%d', math.ceil((2 * window - e) / 1000)))
  end
  if lease or atmost then return {granted, room - weighted - n, 0, 2 * window - e, now} end
  return {1, room - weighted - n, 0, 2 * window - e}
end
if lowered then keep() end

local retry
if n > limit then
  -- Never passable: say when the key is full again (or a whole window).
  retry = reset
  if retry == 0 then retry = window end
elseif n <= room then
  -- cur + n fits, so prev > 0 weighs too much: the request passes once x has
  -- shrunk to the largest x' with prev*x' <= (room - n)*window, within this
  -- window or at its end (where x' = 0 and cur becomes prev).
  retry = x - muldiv(room - n, window, prev)
else
  -- cur + n does not fit in this window (cur > 0): in the next one, cur is
  -- the previous count, and the request passes once its weight has shrunk
  -- to the largest x'' with cur*x'' <= (limit - n)*window (x'' < window).
  retry = x + window - muldiv(limit - n, window, cur)
end
if lease or atmost then return {0, remaining, retry, reset, now} end
return {0, remaining, retry, reset}
