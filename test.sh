#!/usr/bin/env bash
# The test command: starts a throwaway redis-server on a free loopback port
# (installing Debian's redis-server first if it is missing), runs
# `go test -race ./...` against it, then stops it.
#
#   ./test.sh                 all packages
#   ./test.sh -run TestX ./store/   extra arguments replace ./...
#   NORACE=1 ./test.sh -run '^$' -bench . -benchmem ./store/
#                             benchmarks, without the race detector
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
  rm -rf "$work"
}
trap cleanup EXIT

# start_redis DIR [ARGS...]: starts a daemonized redis-server on a free
# loopback port and sets REDIS_PORT.
start_redis() {
  local dir=$1; shift
  mkdir -p "$dir"
  for _ in $(seq 1 50); do
    local port=$(( (RANDOM % 20000) + 30000 ))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --daemonize yes --dir "$dir" --logfile "$dir/redis.log" \
      --pidfile "$dir/redis.pid" "$@" || continue
    for _ in $(seq 1 100); do
      if redis-cli -p "$port" ping >/dev/null 2>&1; then
        pids+=("$(cat "$dir/redis.pid")")
        REDIS_PORT=$port
        return 0
      fi
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

if [ $# -eq 0 ]; then set -- ./...; fi
race=-race
[ "${NORACE:-}" = 1 ] && race=
go test $race "$@"
