#!/usr/bin/env bash
# Two or more server variants (a binary, a config) on stores of one size, measured in turns: each
# variant loads its own store once (its tables written the way that variant writes them), then
# every round starts each variant on its store in turn, warms up for 5 s and measures one wrk run,
# so the machine's drift falls on every variant alike.
#
#   bench/http/alternate.sh <docs> <get|put> <rounds> <name>:<binary>[:<config.ini>] ...
#   e.g. BENCH_AUTH=admin:admin bench/http/alternate.sh 3000000 get 3 \
#          before:/tmp/chaise-old after:build/server/chaise cache:build/server/chaise:/tmp/cache.ini
#
# Prints per variant and round: requests/s, p99, the server's CPU per request (user + system from
# /proc, as cpu.sh), its RSS and chaise_memory_bytes by part. Environment: BENCH_AUTH (required),
# DURATION (s per measured run, default 15), STORES (directory for the stores, default a temporary
# one, removed at the end; give one to keep loaded stores between invocations).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC2034  # lib.sh's start_chaise runs the binary relative to it
root="$(cd "$here/../.." && pwd)"
docs="${1:?docs}"
workload="${2:?get|put}"
rounds="${3:?rounds}"
shift 3
(($# > 0)) || { echo "name at least one variant: <name>:<binary>[:<config>]" >&2; exit 2; }
: "${BENCH_AUTH:?BENCH_AUTH=user:password is required}"
DURATION="${DURATION:-15}"
case "$workload" in
  get) script="$here/get_doc.lua" ;;
  put) script="$here/put_new_docs.lua" ;;
  *) echo "unknown workload $workload" >&2; exit 2 ;;
esac
# shellcheck source=bench/http/lib.sh
source "$here/lib.sh"
stores="${STORES:-}"
own_stores=""
if [[ -z "$stores" ]]; then
  stores="$(mktemp -d /tmp/chaise-alternate-XXXXXX)"
  own_stores="$stores"
fi
finish() {  # instead of lib.sh's cleanup, which would remove the store
  if [[ -n "$pid" ]]; then stop_chaise || true; fi
  if [[ -n "$own_stores" ]]; then rm -rf "$own_stores"; fi
}
trap finish EXIT
db=benchalt
curl_auth=(-u "$BENCH_AUTH")
BENCH_AUTH_HEADER="Basic $(printf '%s' "$BENCH_AUTH" | base64 -w0)"
export BENCH_AUTH_HEADER
wrk_auth=(-H "Authorization: $BENCH_AUTH_HEADER")

run_variant() {  # run_variant <name> <binary> <config>: starts the server on its store
  datadir="$stores/$1"
  mkdir -p "$datadir"
  CHAISE_BIN="$2" CHAISE_CONFIG="$3" start_chaise
}

for v in "$@"; do
  IFS=: read -r name bin cfg <<<"$v"
  [[ -d "$stores/$name/data" ]] && continue
  run_variant "$name" "$bin" "$cfg"
  curl "${curl_auth[@]}" -sf -X PUT "$base/$db" >/dev/null
  python3 "$here/load_docs.py" "$base" $db 0 "$docs" >/dev/null
  sleep 20  # flushes and compactions of the load settle
  stop_chaise
done

export BENCH_DB=$db BENCH_DOCS=$docs BENCH_ID_FORMAT='d%08d'
hz=$(getconf CLK_TCK)
for round in $(seq "$rounds"); do
  for v in "$@"; do
    IFS=: read -r name bin cfg <<<"$v"
    run_variant "$name" "$bin" "$cfg"
    wrk "${wrk_auth[@]}" -t2 -c64 -d5s -s "$script" "$base" >/dev/null
    t0=$(cpu_ticks "$pid")
    out="$(wrk "${wrk_auth[@]}" -t2 -c64 -d"${DURATION}s" --latency -s "$script" "$base")"
    t1=$(cpu_ticks "$pid")
    n=$(awk '/requests in/ {print $1}' <<<"$out")
    rate=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    rss=$(awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$pid/status")
    parts=$(curl -s "${curl_auth[@]}" "$base/_node/_local/_prometheus" |
      awk -F'"' '/^chaise_memory_bytes/ {split($3, v, " "); printf " %s %.1f", $2, v[2] / 1048576}')
    cpu=$(python3 -c "print(round(($t1 - $t0) / $hz * 1e6 / $n, 1))")
    echo "round $round $workload $name: $rate req/s, p99 $p99, server CPU per request $cpu us, RSS $rss MiB;$parts MiB"
    stop_chaise
  done
done
