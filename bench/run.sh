#!/usr/bin/env bash
# The benchmark command: fleetlimit side by side with redis_rate, ulule/limiter,
# throttled, x/time/rate and go-limiter, on a throwaway redis-server that the
# benchmark starts on a free loopback port. Writes RESULTS.md here and
# ../docs/performance.md.
#
#   ./run.sh            full run, a few minutes
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

export FLEETBENCH_COMMAND="cd bench && ./run.sh${*:+ $*}"
exec go run ./cmd/fleetbench "$@"
