-- All: several strategies in one decision, all or nothing. Twin of
-- algorithm/all.go.
--
-- This is the driver; algorithm.All prepends its members' own scripts, each
-- wrapped as a function of (KEYS, ARGV), as
--   local member = {}
--   member[1] = function(KEYS, ARGV) <member 1's script> end
--   ...
-- so each member's rule is its own script, unchanged, run on its own key.
--
-- KEYS[i]  member i's key
-- ARGV[1]  now (integer microseconds since the Unix epoch) or "" for TIME
-- ARGV[2]  n, the cost of this request
-- ARGV[3..] for each member in order: c (the count of its own parameters),
--          probe (a cost above its limit), then its c parameters
-- ARGV[#ARGV]  "peek" on a peek: decide, and write nothing; "refund" on a
--              refund: every member gives back n (each was charged n for
--              every admission) by its own refund rule; "lease" on a lease,
--              after ARGV[#ARGV-3..#ARGV-1] = back_at, back, want (below);
--              "acquire", "release" or "renew" after ARGV[#ARGV-1] = a
--              permit's identity, for a composite with a member that holds
--              permits (holds[m], set by algorithm.All): see below; "atmost"
--              on a partial grant: the most of n every member can take
--              (below)
--              "charge" after ARGV[#ARGV-1] = the debt cap: every member
--              is charged n past its limit (below)
-- Returns, for each member in order, {allowed, remaining, retry_after_us,
-- reset_after_us}; algorithm.All combines them into the decision. A lease
-- or a partial grant returns {granted, now} followed by those four for each
-- member.
--
-- Every member first decides with its peek flag, which writes nothing. Only
-- when every member admits does each decide again for real, and charge: a
-- denial charges no member. A member that would have admitted a denied
-- request reports its figures as they are, uncharged: its decision on the
-- probe (a cost it can never admit, so it records nothing and reports the
-- key as it is), with allowed 1 and no wait.
--
-- Time is read once, so that every member decides at the same instant.
-- Out of memory: the first write is the first member's, which a Redis over
-- maxmemory refuses before anything is written (see token_bucket.lua).
-- (now, n and the modes: see preamble.lua, which scripts.go prepends)

local args, probes = {}, {}
local i = 3
for m = 1, #member do
  local c = tonumber(ARGV[i])
  probes[m] = ARGV[i + 1]
  local a = {now, n}
  for j = 1, c do a[2 + j] = ARGV[i + 1 + j] end
  args[m] = a
  i = i + 2 + c
end

-- call runs member m with cost (its own parameters after it) and then the
-- arguments given, if any: a mode ('peek' or 'refund'), or a lease's terms
-- and 'lease'.
local function call(m, cost, ...)
  local a = {}
  for j = 1, #args[m] do a[j] = args[m][j] end
  a[2] = cost
  for _, x in ipairs({...}) do a[#a + 1] = x end
  return member[m]({KEYS[m]}, a)
end

-- flat lists the members' replies' first four integers after head.
local function flat(head, replies)
  for m = 1, #member do
    for j = 1, 4 do head[#head + 1] = replies[m][j] end
  end
  return head
end

if charge then
  -- A charge (algorithm.All's Charge): every member is charged n by its
  -- own charge mode, each capped by its own debt cap (ARGV[#ARGV-1];
  -- negative: each member's own limit). Every member first peeks, which
  -- writes nothing, so that a member whose key holds something else
  -- (WRONGTYPE) fails the charge before any member is charged: all or
  -- none. Each member's reply has the units its cap cut off third.
  for m = 1, #member do
    local r = call(m, n, 'peek')
    if r.err then return r end
  end
  local replies = {}
  for m = 1, #member do
    local r = call(m, n, ARGV[#ARGV - 1], 'charge')
    if r.err then return r end
    replies[m] = r
  end
  return flat({}, replies)
end

if refund then
  local replies = {}
  for m = 1, #member do
    local r = call(m, n, 'refund')
    if r.err then return r end
    replies[m] = r
  end
  return flat({}, replies)
end

-- decide decides a request of cost for every member, all or none (above),
-- and returns their replies and whether all admitted, or the first error
-- reply third. With permit, the member that holds permits takes that
-- permit instead of its plain decision, which holds nothing.
local function decide(cost, permit)
  local replies, admit = {}, true
  for m = 1, #member do
    local r = call(m, cost, 'peek')
    if r.err then return nil, false, r end
    replies[m] = r
    if r[1] ~= 1 then admit = false end
  end
  if admit and not peek then
    for m = 1, #member do
      local r
      if permit and holds[m] then
        r = call(m, cost, permit, 'acquire')
      else
        r = call(m, cost)
      end
      if r.err then return nil, false, r end
      replies[m] = r
    end
  elseif not admit then
    for m = 1, #member do
      if replies[m][1] == 1 then
        local r = call(m, probes[m], 'peek')
        if r.err then return nil, false, r end
        replies[m] = {1, r[2], 0, r[4]}
      end
    end
  end
  return replies, admit
end

if lease then
  -- A lease (algorithm.All's Lease): every member first gives back the
  -- earlier lease's units by its own lease mode with want 0, which also
  -- returns what it has left; the composite's available units are the
  -- fewest any member has. Then one decision of the fair share of those
  -- (at most half, unless n alone needs more; never more than want), so
  -- that every member is charged exactly the granted units, or none when
  -- n does not pass.
  local back_at, back = ARGV[#ARGV - 3], ARGV[#ARGV - 2]
  local want = tonumber(ARGV[#ARGV - 1])
  local replies, available, limit = {}, nil, nil
  for m = 1, #member do
    local r = call(m, 0, back_at, back, 0, 'lease')
    if r.err then return r end
    replies[m] = r
    if available == nil or r[2] < available then available = r[2] end
    local l = tonumber(probes[m]) - 1
    if limit == nil or l < limit then limit = l end
  end
  if want == 0 then return flat({0, now}, replies) end
  local cost = lease_units(n, limit, available, want)
  local admit, err
  replies, admit, err = decide(cost)
  if err then return err end
  local granted = 0
  if admit then granted = cost end
  return flat({granted, now}, replies)
end

if atmost then
  -- A partial grant (algorithm.All's AtMost): the most of n that every
  -- member can take is the fewest units any member has left, read from its
  -- figures as they are (its peek at the probe, which writes nothing).
  -- They are decided as one request, all or none, so that every member is
  -- charged exactly the granted units; with none left somewhere, a request
  -- of 1 is (and denied, no member charged).
  local cost = n
  for m = 1, #member do
    local r = call(m, probes[m], 'peek')
    if r.err then return r end
    if r[2] < cost then cost = r[2] end
  end
  local granted = cost
  local replies, admit, err = decide(math.max(cost, 1))
  if err then return err end
  if not admit then granted = 0 end
  return flat({granted, now}, replies)
end

local op = ARGV[#ARGV]
if op == 'acquire' or op == 'release' or op == 'renew' then
  -- A permit (algorithm.All's Hold). A release or renew goes to the
  -- member that holds permits only; the others report their figures as
  -- they are (their probe, uncharged). An acquire is one decision of cost
  -- 1 by every member — the holder's plain decision says whether a slot
  -- is free — and, when all admit, charges the others and takes the
  -- permit in the holder.
  local id = ARGV[#ARGV - 1]
  local replies = {}
  if op ~= 'acquire' then
    for m = 1, #member do
      local r
      if holds[m] then
        r = call(m, n, id, op)
        if r.err then return r end
      else
        r = call(m, probes[m], 'peek')
        if r.err then return r end
        r = {1, r[2], 0, r[4]}
      end
      replies[m] = r
    end
    return flat({}, replies)
  end
  local admit, err
  replies, admit, err = decide(n, id)
  if err then return err end
  return flat({}, replies)
end

local replies, _, err = decide(n)
if err then return err end
return flat({}, replies)
