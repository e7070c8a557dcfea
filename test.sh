#!/usr/bin/env bash
# The test command: starts a throwaway redis-server and a throwaway 3-master
# Redis Cluster on free loopback ports, and the same pair of Valkey
# (valkey-server), installing Debian's packages first when they are missing
# (Valkey from bookworm-backports), runs `go test -race ./...` against them,
# then stops them.
#
#   ./test.sh                 all packages of every module, then a short fuzz run of every target
#   ./test.sh -run TestX ./store/   extra arguments replace ./... (no fuzzing); the
#                             packages must be of one module: ./grpclimit/ runs in
#                             the grpclimit module
#   NORACE=1 ./test.sh -run '^$' -bench . -benchmem ./store/
#                             benchmarks, without the race detector
#
# The tests find the servers in FLEETLIMIT_REDIS_ADDR (host:port) and
# FLEETLIMIT_REDIS_CLUSTER_ADDRS (the masters, comma-separated), and Valkey's
# in FLEETLIMIT_VALKEY_ADDR and FLEETLIMIT_VALKEY_CLUSTER_ADDRS.
# FLEETLIMIT_FUZZTIME (default 5s) sets how long each fuzz target runs.
set -euo pipefail
cd "$(dirname "$0")"

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
apt_install() {
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# backports_source prints an apt source for this release's backports suite,
# derived from the source that already serves the release itself (same
# URIs, components and key): deb822 .sources files first, then one-line
# sources.list entries. It prints nothing when no source serves the release.
backports_source() {
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || return 0
  local deb822
  deb822=$(for f in /etc/apt/sources.list.d/*.sources; do [ -f "$f" ] && cat "$f" && echo; done |
    awk -v suite="$codename" '
      BEGIN { RS = ""; FS = "\n" }
      {
        split("", v)
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^[ \t]*#/ || $i ~ /^[ \t]/) continue # comments, continuation lines
          n = index($i, ":")
          if (n == 0) continue
          val = substr($i, n + 1)
          gsub(/^[ \t]+|[ \t]+$/, "", val)
          v[tolower(substr($i, 1, n - 1))] = val
        }
        ours = 0
        ns = split(v["suites"], s, /[ \t]+/)
        for (j = 1; j <= ns; j++) if (s[j] == suite) ours = 1
        if (ours && v["types"] ~ /(^|[ \t])deb([ \t]|$)/ && tolower(v["enabled"]) != "no") {
          print "Types: deb"
          print "URIs: " v["uris"]
          print "Suites: " suite "-backports"
          print "Components: " v["components"]
          if (v["signed-by"] != "") print "Signed-By: " v["signed-by"]
          exit
        }
      }')
  if [ -n "$deb822" ]; then
    echo "$deb822"
    return 0
  fi
  # One-line form: "deb [options] URI SUITE COMPONENTS...".
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk -v suite="$codename" '
      $1 == "deb" {
        i = 2
        if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) {
          line = $1
          for (j = 2; j <= NF; j++) line = line " " (j == i + 1 ? suite "-backports" : $j)
          print line
          exit
        }
      }'
}

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  echo "test.sh: installing redis-server (Debian package)" >&2
  $sudo apt-get update -qq
  apt_install redis-server redis-tools
fi
if ! command -v valkey-server >/dev/null || ! command -v valkey-cli >/dev/null; then
  # valkey-server depends on valkey-tools, which has valkey-cli. Debian
  # 12 has it in backports only: enable that suite unless a source has it.
  $sudo apt-get update -qq
  candidate=$(apt-cache policy valkey-server 2>/dev/null | sed -n 's/^ *Candidate: *//p')
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
    src=$(backports_source)
    if [ -z "$src" ]; then
      echo "test.sh: valkey-server is not installed and no apt source serves this release, so backports cannot be derived" >&2
      exit 1
    fi
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    file=/etc/apt/sources.list.d/$codename-backports.sources
    case $src in deb\ *) file=/etc/apt/sources.list.d/$codename-backports.list ;; esac
    echo "test.sh: enabling $codename-backports in $file, for valkey-server" >&2
    echo "$src" | $sudo tee "$file" >/dev/null
    $sudo apt-get update -qq
  fi
  echo "test.sh: installing valkey-server (Debian package)" >&2
  apt_install valkey-server valkey-tools
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

# start_server BIN DIR [ARGS...]: starts a daemonized BIN (redis-server or
# valkey-server, which take the same arguments; the matching -cli checks it)
# on a free loopback port and sets PORT.
start_server() {
  local bin=$1 dir=$2; shift 2
  local cli=${bin%-server}-cli
  mkdir -p "$dir"
  for _ in $(seq 1 50); do
    # port+10000 is a cluster node's bus port: keep both free.
    local port=$(( (RANDOM % 20000) + 30000 ))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$((port + 10000))") 2>/dev/null; then continue; fi
    rm -f "$dir/redis.pid" "$dir/redis.log"
    "$bin" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --daemonize yes --dir "$dir" --logfile "$dir/redis.log" \
      --pidfile "$dir/redis.pid" "$@" || continue
    for _ in $(seq 1 100); do
      # Another process may have taken the port since the check (the
      # tests' own servers use ephemeral ports): only ours has our dir.
      if [ "$("$cli" -p "$port" config get dir 2>/dev/null | tail -n 1)" = "$(cd "$dir" && pwd -P)" ]; then
        pids+=("$("$cli" -p "$port" info server | tr -d '\r' | sed -n 's/^process_id://p')")
        PORT=$port
        return 0
      fi
      [ -f "$dir/redis.log" ] && grep -q 'Address already in use\|Could not create server' "$dir/redis.log" && break
      sleep 0.05
    done
    [ -f "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
  done
  echo "test.sh: could not start $bin; its log:" >&2
  cat "$dir/redis.log" >&2 || true
  return 1
}

# start_cluster BIN NAME: a 3-master cluster of BIN (no replicas): each node
# in its own directory with its own nodes.conf, joined by the matching -cli,
# ready once every node says cluster_state:ok. Sets CLUSTER (the masters,
# comma-separated).
start_cluster() {
  local bin=$1 name=$2
  local cli=${bin%-server}-cli
  local nodes=()
  for i in 1 2 3; do
    start_server "$bin" "$work/$name$i" --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-node-timeout 2000
    nodes+=("127.0.0.1:$PORT")
  done
  if ! "$cli" --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$work/$name-create.log" 2>&1; then
    echo "test.sh: $cli --cluster create failed:" >&2
    cat "$work/$name-create.log" >&2
    exit 1
  fi
  for node in "${nodes[@]}"; do
    for i in $(seq 1 200); do
      if "$cli" -h "${node%:*}" -p "${node#*:}" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then break; fi
      if [ "$i" -eq 200 ]; then
        echo "test.sh: cluster node $node never reached cluster_state:ok" >&2
        exit 1
      fi
      sleep 0.05
    done
  done
  CLUSTER=$(IFS=,; echo "${nodes[*]}")
}

start_server redis-server "$work/redis"
export FLEETLIMIT_REDIS_ADDR="127.0.0.1:$PORT"
echo "test.sh: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on $FLEETLIMIT_REDIS_ADDR"
start_cluster redis-server cluster
export FLEETLIMIT_REDIS_CLUSTER_ADDRS=$CLUSTER
echo "test.sh: redis cluster (3 masters) on $FLEETLIMIT_REDIS_CLUSTER_ADDRS"

start_server valkey-server "$work/valkey"
export FLEETLIMIT_VALKEY_ADDR="127.0.0.1:$PORT"
echo "test.sh: valkey-server $(valkey-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on $FLEETLIMIT_VALKEY_ADDR"
start_cluster valkey-server valkey-cluster
export FLEETLIMIT_VALKEY_CLUSTER_ADDRS=$CLUSTER
echo "test.sh: valkey cluster (3 masters) on $FLEETLIMIT_VALKEY_CLUSTER_ADDRS"

# envoyproxy/ratelimit itself, built from the Go module proxy, for
# fleetlimitd's differential test (cmd/fleetlimitd TestDifferential) when the
# run includes fleetlimitd; a build that fails says so, and that test skips.
envoy_ratelimit=github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
if [ -z "${FLEETLIMITD_ENVOY_RATELIMIT:-}" ] && { [ $# -eq 0 ] || [[ "$*" == *cmd/fleetlimitd* ]]; }; then
  if GOBIN="$work/bin" go install "$envoy_ratelimit" >"$work/envoy-ratelimit.log" 2>&1; then
    export FLEETLIMITD_ENVOY_RATELIMIT="$work/bin/service_cmd"
    echo "test.sh: envoyproxy/ratelimit built from ${envoy_ratelimit#*@}"
  else
    echo "test.sh: envoyproxy/ratelimit did not build, TestDifferential will skip: $(tail -n 1 "$work/envoy-ratelimit.log")"
  fi
fi

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
    # A run that fails without writing a failing input is the fuzzing
    # engine's own error (such as "context deadline exceeded" on a loaded
    # machine), not a finding: it runs once more, and a second failure fails.
    if ! out=$(go test -run '^$' -fuzz "^$target\$" -fuzztime "${FLEETLIMIT_FUZZTIME:-5s}" "$pkg" 2>&1); then
      echo "$out"
      if grep -q 'Failing input written to' <<<"$out"; then exit 1; fi
      echo "test.sh: $target failed without a failing input: once more" >&2
      go test -run '^$' -fuzz "^$target\$" -fuzztime "${FLEETLIMIT_FUZZTIME:-5s}" "$pkg"
    else
      echo "$out"
    fi
  done
