-- Penalty box: a strategy whose key, denied After times within Within, is
-- refused outright for Ban, doubling on each repeat up to MaxBan. Twin of
-- algorithm/penalty.go.
--
-- This is the driver; algorithm.Penalize prepends the inner strategy's own
-- script wrapped as a function of (KEYS, ARGV):
--   local inner = function(KEYS, ARGV) <the inner script> end
--
-- KEYS[1..#KEYS-1]  the inner strategy's keys
-- KEYS[#KEYS]       the penalty's key: "<denials>:<since>:<until>:<strikes>"
-- ARGV[1]  now (integer microseconds since the Unix epoch) or "" for TIME
-- ARGV[2]  n, the cost of this request
-- ARGV[3..6]  after, within_us, ban_us, max_ban_us
-- ARGV[7]  probe, a cost above the inner strategy's limit
-- ARGV[8..]  the inner strategy's own parameters
-- ARGV[#ARGV]  "peek" on a peek: decide, and write nothing; "refund" on a
--              refund: the inner strategy gives back n, the ban is as it
--              was; "lease" on a lease, after ARGV[#ARGV-3..#ARGV-1] =
--              back_at, back, want (below); "ahead" on a lease taken
--              ahead, after the same three (below); "atmost" on a partial
--              grant (below); "charge" after ARGV[#ARGV-1] = the debt
--              cap: the inner strategy is charged n past its limit, the
--              ban is as it was
-- Returns {mode, wait_us, 0, 0} followed by the inner script's reply;
-- algorithm.Penalize reads them (mode 0: the inner decision stands; 1: this
-- denial starts a ban of wait_us; 2: banned for wait_us more, the inner
-- reply is its peek at n; 3: the same, but the inner strategy would admit n
-- and the reply is its figures as they are, read with the probe). A lease
-- or a partial grant returns {mode, wait_us, granted, now} followed by the
-- inner decision's four integers (or four per member of a composite).
--
-- A lease (algorithm.Penalize's Lease): the inner strategy is first given
-- back the earlier lease's units by its own lease mode (want 0), banned or
-- not, since a ban lifts no charge. Banned, the lease takes nothing and the
-- reply is the ban's, as a decision's. Otherwise the inner strategy's
-- lease mode decides, and a lease it denies is counted toward a ban as a
-- denied decision is. A lease taken ahead (mode "ahead";
-- fleetlimit.WithLeaseAhead) is a lease in every way but one: it decides
-- nothing for a caller, so a denial of it is not counted.
--
-- The state: denials counted since `since` (a count restarts once Within
-- has passed since its first denial), the end of the current or last ban
-- (`until`), and the bans so far (`strikes`), forgotten once MaxBan has
-- passed since the last ban ended. A banned request is not counted (a ban
-- would otherwise never lift while its client keeps knocking). The key
-- expires once nothing in it matters: when the count's Within and the
-- strikes' MaxBan after the ban have both passed.
--
-- Out of memory: the penalty's only write, after a denial, is made with
-- pcall, so a Redis over maxmemory still answers the decision; the denial
-- goes uncounted.
-- (now and the modes: see preamble.lua, which scripts.go prepends; the
-- mode "ahead" is this driver's own, a lease in every way but one, above)
local ahead = ARGV[#ARGV] == 'ahead'
lease = lease or ahead
local t = now
local after = ARGV[3] + 0
local within = ARGV[4] + 0
local ban = ARGV[5] + 0
local maxban = ARGV[6] + 0
local probe = ARGV[7]

local ikeys = {}
for i = 1, #KEYS - 1 do ikeys[i] = KEYS[i] end
local key = KEYS[#KEYS]

-- args is the inner script's ARGV for cost, then the arguments given, if
-- any: a mode ('peek' or 'refund'), or a lease's terms and 'lease'.
local function args(cost, ...)
  local a = {now, cost}
  local last = #ARGV
  if peek or refund or atmost then last = last - 1 elseif lease then last = last - 4 end
  if charge then last = last - 2 end
  for i = 8, last do a[#a + 1] = ARGV[i] end
  for _, x in ipairs({...}) do a[#a + 1] = x end
  return a
end

-- admits reports whether every decision in an inner reply (four integers
-- each: one, or one per member of a composite) admits.
local function admits(r)
  for i = 1, #r, 4 do
    if r[i] ~= 1 then return false end
  end
  return true
end

-- An inner lease reply is {granted, remaining, retry_after_us,
-- reset_after_us, now} from a one-key script, or {granted, now} and four
-- integers per member from a composite (all.lua): never five integers.
-- leased returns its granted units and time; decision its decision's
-- integers, as a decision's reply would have them.
local function leased(r)
  if #r == 5 then return r[1], r[5] end
  return r[1], r[2]
end

local function decision(r)
  if #r == 5 then
    local allowed = 0
    if r[1] > 0 then allowed = 1 end
    return {allowed, r[2], r[3], r[4]}
  end
  local d = {}
  for i = 3, #r do d[#d + 1] = r[i] end
  return d
end

local function reply(head, r)
  for i = 1, #r do head[#head + 1] = r[i] end
  return head
end

if refund then
  local r = inner(ikeys, args(ARGV[2], 'refund'))
  if r.err then return r end
  return reply({0, 0, 0, 0}, r)
end

if charge then
  -- A charge (algorithm.Penalize's Charge): the inner strategy is charged
  -- n past its limit, up to the debt cap ARGV[#ARGV-1]; the ban is as it
  -- was (a charge is no denial, and lifts no ban).
  local r = inner(ikeys, args(ARGV[2], ARGV[#ARGV - 1], 'charge'))
  if r.err then return r end
  return reply({0, 0, 0, 0}, r)
end

local denials, since, untl, strikes = 0, 0, 0, 0
local v = redis.call('GET', key)
if v then
  local a, b, c, d = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
  if not a or #a > 16 or #b > 16 or #c > 16 or #d > 16 then
    return redis.error_reply('WRONGTYPE ' .. key .. ' does not hold a penalty box')
  end
  denials, since, untl, strikes = a + 0, b + 0, c + 0, d + 0
end
if strikes > 0 and t >= untl and t - untl >= maxban then
  strikes = 0 -- quiet for MaxBan since the last ban: forgiven
end

-- at is the time a lease reply names (the head's fourth integer).
local at = 0
local back_at, back, want
if lease then
  back_at, back, want = ARGV[#ARGV - 3], ARGV[#ARGV - 2], tonumber(ARGV[#ARGV - 1])
  if want == 0 or t < untl then
    local r = inner(ikeys, args(0, back_at, back, 0, 'lease'))
    if r.err then return r end
    if want == 0 then
      local _, a = leased(r)
      return reply({0, 0, 0, a}, decision(r))
    end
  end
  at = t
end

-- cost is the request's cost, but for a partial grant (algorithm.Penalize's
-- AtMost): banned, it is decided as a request of 1, as one that grants
-- nothing is; otherwise the inner strategy's atmost mode decides, and a
-- grant of 0 is counted toward a ban as a denied decision is.
local cost = ARGV[2]
if atmost then
  cost, at = '1', t
end

if t < untl then
  -- Banned: nothing passes, nothing is counted or written.
  local r = inner(ikeys, args(cost, 'peek'))
  if r.err then return r end
  if not admits(r) then return reply({2, untl - t, 0, at}, r) end
  r = inner(ikeys, args(probe, 'peek'))
  if r.err then return r end
  return reply({3, untl - t, 0, at}, r)
end

local r
if lease or atmost then
  if lease then
    r = inner(ikeys, args(ARGV[2], back_at, back, want, 'lease'))
  else
    r = inner(ikeys, args(ARGV[2], 'atmost'))
  end
  if r.err then return r end
  local granted
  granted, at = leased(r)
  r = decision(r)
  if granted > 0 or ahead then return reply({0, 0, granted, at}, r) end
else
  r = inner(ikeys, args(ARGV[2], peek and 'peek' or nil))
  if r.err then return r end
  if admits(r) then return reply({0, 0, 0, 0}, r) end
end

if since == 0 or t - since >= within then
  since, denials = t, 0
end
denials = denials + 1
local head = {0, 0, 0, at}
if denials >= after then
  local b = ban
  for _ = 1, strikes do
    if b >= maxban then break end
    b = b * 2
  end
  if b > maxban then b = maxban end
  untl, strikes, denials, since = t + b, strikes + 1, 0, 0
  head = {1, b, 0, at}
end
if not peek then
  local ttl = 0
  if denials > 0 then ttl = since + within - t end
  if strikes > 0 and untl + maxban - t > ttl then ttl = untl + maxban - t end
  redis.pcall('SET', key, string.format('%d:%d:%d:%d', denials, since, untl, strikes), 'PX', string.format('%d', math.ceil(ttl / 1000)))
end
return reply(head, r)
