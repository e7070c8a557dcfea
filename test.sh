#!/usr/bin/env bash
# The test command: starts a throwaway redis-server and a throwaway 3-master
# Redis Cluster on free loopback ports (installing Debian's redis-server first
# if it is missing), runs `go test -race ./...` against them, then stops them.
#
#   ./test.sh                 all packages of every module, then a short fuzz run of every target
#   ./test.sh -run TestX ./store/   extra arguments replace ./... (no fuzzing); the
#                             packages must be of one module: ./grpclimit/ runs in
#                             the grpclimit module
#   NORACE=1 ./test.sh -run '^$' -bench . -benchmem ./store/
#                             benchmarks, without the race detector
#
# The tests find the servers in FLEETLIMIT_REDIS_ADDR (host:port) and
# FLEETLIMIT_REDIS_CLUSTER_ADDRS (the masters, comma-separated).
# FLEETLIMIT_FUZZTIME (default 5s) sets how long each fuzz target runs.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  echo "test.sh: installing redis-server (Debian package)" >&2
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-tools >/dev/null
fi

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  # Wait (up to 5s) for the servers to exit: a cluster node writes its
  # nodes.conf on the way out, and rm would race it.
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  done
  rm -rf "$work"
}
trap cleanup EXIT

# start_redis DIR [ARGS...]: starts a daemonized redis-server on a free
# loopback port and sets REDIS_PORT.
start_redis() {
  local dir=$1; shift
  mkdir -p "$dir"
  for _ in $(seq 1 50); do
    # port+10000 is a cluster node's bus port: keep both free.
    local port=$(( (RANDOM % 20000) + 30000 ))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$((port + 10000))") 2>/dev/null; then continue; fi
    rm -f "$dir/redis.pid" "$dir/redis.log"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --daemonize yes --dir "$dir" --logfile "$dir/redis.log" \
      --pidfile "$dir/redis.pid" "$@" || continue
    for _ in $(seq 1 100); do
      # Another process may have taken the port since the check (the
      # tests' own servers use ephemeral ports): only ours has our dir.
      if [ "$(redis-cli -p "$port" config get dir 2>/dev/null | tail -n 1)" = "$(cd "$dir" && pwd -P)" ]; then
        pids+=("$(redis-cli -p "$port" info server | tr -d '\r' | sed -n 's/^process_id://p')")
        REDIS_PORT=$port
        return 0
      fi
      [ -f "$dir/redis.log" ] && grep -q 'Address already in use\|Could not create server' "$dir/redis.log" && break
      sleep 0.05
    done
    [ -f "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
  done
  echo "test.sh: could not start redis-server; its log:" >&2
  cat "$dir/redis.log" >&2 || true
  return 1
}

start_redis "$work/redis"
export FLEETLIMIT_REDIS_ADDR="127.0.0.1:$REDIS_PORT"
echo "test.sh: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on $FLEETLIMIT_REDIS_ADDR"

# A 3-master cluster (no replicas): each node in its own directory with its
# own nodes.conf, joined by redis-cli, ready once every node says
# cluster_state:ok.
cluster=()
for i in 1 2 3; do
  start_redis "$work/cluster$i" --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 2000
  cluster+=("127.0.0.1:$REDIS_PORT")
done
if ! redis-cli --cluster create "${cluster[@]}" --cluster-replicas 0 --cluster-yes >"$work/cluster-create.log" 2>&1; then
  echo "test.sh: redis-cli --cluster create failed:" >&2
  cat "$work/cluster-create.log" >&2
  exit 1
fi
for node in "${cluster[@]}"; do
  for i in $(seq 1 200); do
    if redis-cli -h "${node%:*}" -p "${node#*:}" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then break; fi
    if [ "$i" -eq 200 ]; then
      echo "test.sh: cluster node $node never reached cluster_state:ok" >&2
      exit 1
    fi
    sleep 0.05
  done
done
FLEETLIMIT_REDIS_CLUSTER_ADDRS=$(IFS=,; echo "${cluster[*]}")
export FLEETLIMIT_REDIS_CLUSTER_ADDRS
echo "test.sh: redis cluster (3 masters) on $FLEETLIMIT_REDIS_CLUSTER_ADDRS"

# Tests that need a real server fail, rather than skip, without one.
export FLEETLIMIT_REQUIRE_REDIS=1

race=-race
[ "${NORACE:-}" = 1 ] && race=
# The property tests run hundreds of cases per store under the race
# detector: on a loaded 2-core machine the root package has run past go
# test's default limit of 10 minutes (it takes about 2 on a quiet one).
race="$race -timeout=30m"
# The nested modules: the adapters whose dependencies (grpc-go,
# client_golang) the core module does not carry, and the gRPC example.
modules=(grpclimit promobserver otelobserver examples/grpcserver cmd/fleetlimitd)
if [ $# -gt 0 ]; then
  # A package path inside a nested module runs in that module.
  dir=.
  args=()
  for a in "$@"; do
    p=${a#./}
    for m in "${modules[@]}"; do
      if [ "$p" = "$m" ] || [ "${p#"$m"/}" != "$p" ]; then
        dir=$m
        a=./${p#"$m"}
        a=${a/#.\/\//./}
      fi
    done
    args+=("$a")
  done
  cd "$dir"
  go test $race "${args[@]}"
  exit
fi
go test $race ./...
for m in "${modules[@]}"; do
  (cd "$m" && go test $race ./...)
done
# The fuzz targets' seed corpora ran above; now fuzz each briefly (one
# target per invocation, as go test requires). Run longer by hand, e.g.
#   FLEETLIMIT_FUZZTIME=10m ./test.sh   or   go test -run '^$' -fuzz FuzzX -fuzztime 10m ./store/
go test -list '^Fuzz' ./... | awk '/^Fuzz/ { f[n++] = $1 } /^ok/ { for (i = 0; i < n; i++) print $2, f[i]; n = 0 }' |
  while read -r pkg target; do
    go test -run '^$' -fuzz "^$target\$" -fuzztime "${FLEETLIMIT_FUZZTIME:-5s}" "$pkg"
  done
