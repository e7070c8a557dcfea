#!/usr/bin/env bash
# Instructions per decision in process, counted by valgrind's callgrind:
# Limiter.Allow over store.Memory and store.Memory.Decide alone, the
# "allow" and "decide" cells of the repository's BenchmarkOverhead, and
# their difference (what the Limiter adds). An instruction count does not
# move with the machine's load, so on a shared, noisy machine it shows a
# change of a few instructions that time cannot; it is a proxy, not a
# time: confirm a change's effect in time with interleaved benchmarks.
#
#   ./instructions.sh                      the working tree
#   ./instructions.sh -base REV            REV, then the working tree, side by side
#   ./instructions.sh -s fixed_window ...  strategies (default: token_bucket
#                                          fixed_window sliding_window_counter)
#
# Each figure is the instructions counted inside the benchmark's loop body
# (callgrind --toggle-collect) over N calls, divided by N. Go's
# asynchronous preemption is off under valgrind (GODEBUG), which otherwise
# crashes it now and then. Installs Debian's valgrind if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

base="" strategies=()
while [ $# -gt 0 ]; do
  case "$1" in
    -base) base=$2; shift 2 ;;
    -s) shift; while [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; do strategies+=("$1"); shift; done ;;
    *) echo "usage: $0 [-base REV] [-s strategy ...]" >&2; exit 2 ;;
  esac
done
[ ${#strategies[@]} -gt 0 ] || strategies=(token_bucket fixed_window sliding_window_counter)

if ! command -v valgrind >/dev/null; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq valgrind >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; [ -z "$base" ] || git worktree remove --force "$tmp/base" 2>/dev/null || true' EXIT

build() { # dir out
  (cd "$1" && CGO_ENABLED=0 go test -c -o "$2" .)
}

# count BIN STRATEGY CELL: instructions per call of the cell's loop body.
count() {
  local fn='BenchmarkOverhead.func2.2.1.1' n=200000 v=""
  [ "$3" = decide ] && fn='BenchmarkOverhead.func2.1.1.1'
  for _ in 1 2 3 4 5 6; do
    v=$(GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --toggle-collect="*$fn" \
      --callgrind-out-file="$tmp/cg.out" "$1" -test.run '^$' \
      -test.bench "BenchmarkOverhead/memory/$2/$3\$" -test.benchtime ${n}x -test.cpu 1 2>&1 |
      awk '/Collected/ {print $4}')
    # A run that crashed, or whose loop the toggle missed, counts too little.
    [ -n "$v" ] && [ "$v" -gt $((n * 300)) ] && break
    v=""
  done
  [ -n "$v" ] || { echo "instructions.sh: callgrind failed 6 times on $2/$3" >&2; exit 1; }
  echo $((v / n))
}

bins=("$tmp/new.test")
build . "$tmp/new.test"
if [ -n "$base" ]; then
  git worktree add -q --detach "$tmp/base" "$base"
  build "$tmp/base" "$tmp/base.test"
  bins=("$tmp/base.test" "$tmp/new.test")
fi

printf '%-24s %-8s %8s %8s %8s\n' strategy build allow decide added
for s in "${strategies[@]}"; do
  for b in "${bins[@]}"; do
    a=$(count "$b" "$s" allow)
    d=$(count "$b" "$s" decide)
    name=working; [ "$b" = "$tmp/base.test" ] && name=$base
    printf '%-24s %-8s %8d %8d %8d\n' "$s" "$name" "$a" "$d" $((a - d))
  done
done
