#!/usr/bin/env bash
# How cost grows with size (issue 10): PUT, GET and _changes?since=<middle> on one database at
# SMALL docs and again after it has grown to LARGE docs, with the server's RSS and the store's size.
#
#   bench/http/scale.sh http://127.0.0.1:5984     # a running server (BENCH_PID for its memory)
#   bench/http/scale.sh --chaise                  # starts build/server/chaise on a temporary dir
#
# Environment: SMALL (default 200000), LARGE (default 10000000), DURATION (s per wrk run, 20),
# SETTLE_MAX (s to wait for the server to go quiet after each load, 300),
# BENCH_AUTH=user:password (Basic auth on every request; with --chaise the server admin),
# CHAISE_CONFIG=<ini> (with --chaise, read after config/default.ini).
# Each step: PUT of new ~200-byte docs (64 connections), GET of random existing docs (64
# connections), and _changes?since=<the sequence of the middle document>&limit=200000 read whole.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
SMALL="${SMALL:-200000}"
LARGE="${LARGE:-10000000}"
DURATION="${DURATION:-20}"
# shellcheck source=bench/http/lib.sh
source "$here/lib.sh"
bench_server "$@"
auth=("${curl_auth[@]}")
db=benchscale
curl "${auth[@]}" -s -X DELETE "$base/$db" >/dev/null || true
curl "${auth[@]}" -sf -X PUT "$base/$db" >/dev/null

# Waits (at most SETTLE_MAX seconds, default 300) until the server has used under 5% of a core
# over 2 s: a database loaded as fast as this one is still compacting afterwards, which a
# database grown over days would not be. Needs the server's pid (--chaise, or BENCH_PID).
settle() {  # settle <docs in the database>
  [[ -n "$server_pid" && -r "/proc/$server_pid/stat" ]] || return 0
  local n=$1 hz waited=0 t0 t1
  hz=$(getconf CLK_TCK)
  while (( waited < ${SETTLE_MAX:-300} )); do
    t0=$(cpu_ticks "$server_pid")
    sleep 2
    t1=$(cpu_ticks "$server_pid")
    waited=$(( waited + 2 ))
    (( (t1 - t0) * 100 < 2 * hz * 5 )) && break
  done
  echo "at $n docs: waited ${waited} s for the server's background work to finish"
}

measure() {  # measure <docs in the database>
  local n=$1 r mid seq t0 t1 rows
  settle "$n"
  r=$(BENCH_DB=$db wrk "${wrk_auth[@]}" -t2 -c64 -d"${DURATION}s" -s "$here/put_new_docs.lua" "$base" | awk '/Requests\/sec/ {print $2}')
  echo "at $n docs: put  $r docs/s"
  r=$(BENCH_DB=$db BENCH_DOCS=$n BENCH_ID_FORMAT='d%08d' wrk "${wrk_auth[@]}" -t2 -c64 -d"${DURATION}s" -s "$here/get_doc.lua" "$base" | awk '/Requests\/sec/ {print $2}')
  echo "at $n docs: get  $r req/s"
  mid=$(printf 'd%08d' $(( n / 2 )))
  seq=$(curl "${auth[@]}" -s "$base/$db/_changes?doc_ids=%5B%22$mid%22%5D&filter=_doc_ids" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["results"][0]["seq"])')
  local out
  out="$(mktemp /tmp/scale-XXXXXX.json)"
  t0=$(date +%s.%N)
  curl "${auth[@]}" -sf "$base/$db/_changes?since=$seq&limit=200000" -o "$out"
  t1=$(date +%s.%N)
  rows=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["results"]))' "$out")
  rm -f "$out"
  echo "at $n docs: _changes?since=<middle>&limit=200000: $rows rows, $(python3 -c "print(round($rows/($t1-$t0)))") rows/s"
  curl "${auth[@]}" -s "$base/_node/_local/_prometheus" | awk -v n="$n" \
    '/^chaise_memory_bytes/ {printf "at %s docs: %s %.1f MiB\n", n, $1, $2/1048576}'
  if [[ -n "$server_pid" && -r "/proc/$server_pid/status" ]]; then
    awk -v n="$n" '/^VmRSS/ {rss=$2} /^VmHWM/ {hwm=$2} END {printf "at %s docs: RSS %.0f MiB, peak %.0f MiB\n", n, rss/1024, hwm/1024}' "/proc/$server_pid/status"
  fi
  [[ -z "$datadir" ]] || echo "at $n docs: data directory $(du -sm "$datadir/data" | cut -f1) MiB"
}

python3 "$here/load_docs.py" "$base" $db 0 "$SMALL"
measure "$SMALL"
python3 "$here/load_docs.py" "$base" $db "$SMALL" "$LARGE"
measure "$LARGE"
