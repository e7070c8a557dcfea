#!/usr/bin/env bash
# The benchmark command: fleetlimit side by side with redis_rate, ulule/limiter,
# throttled, x/time/rate and go-limiter, on a throwaway redis-server (and
# valkey-server, where installed) that the benchmark starts on a free
# loopback port, and fleetlimitd (../cmd/fleetlimitd, built here) over gRPC.
# Writes RESULTS.md here and ../docs/performance.md.
#
#   ./run.sh            full run, about 10 minutes on 2 cores
#   ./run.sh -quick     smoke test
#   ./run.sh -h         every flag
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v redis-server >/dev/null; then
  echo "run.sh: installing redis-server (Debian package)" >&2
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
fi

# The Valkey rows (issue 25) run on valkey-server where the machine has it;
# without it they are left out, and RESULTS.md says so.
valkey=()
if ! command -v valkey-server >/dev/null; then
  echo "run.sh: valkey-server not found: no Valkey rows in RESULTS.md (Debian: apt-get install valkey-server from bookworm-backports)" >&2
  valkey=(-valkey-server '')
fi

export FLEETBENCH_COMMAND="cd bench && ./run.sh${*:+ $*}"
exec go run ./cmd/fleetbench "${valkey[@]}" "$@"
