#!/usr/bin/env bash
# Server CPU per request (issue 10: "a GET of a small doc should cost well under 20 us of server
# CPU"): the server's user and system time from /proc/<pid>/stat across one wrk run, divided by
# the requests served.
#
#   bench/http/cpu.sh --chaise [put|get|missing|local|conflict|bulk|up|denied|anonymous]   # starts build/server/chaise
#   BENCH_PID=<pid> bench/http/cpu.sh http://127.0.0.1:5990 get   # a running server (CouchDB)
#
# put: PUT of new ~200-byte docs; get: GET of one of DOCS preloaded docs; missing: GET of a
# document that is not there (a 404); local: the same of a _local document (a replication's first
# checkpoint read); conflict: PUT of a preloaded doc without its revision (a 409); up: GET /_up
# (what the HTTP layer and authentication cost alone); denied: GET of a preloaded doc with a wrong
# password (a 401); anonymous: the same without credentials, the database open to its members
# only (a 401); bulk: _bulk_docs of 1,000 new docs (4 connections, counted per document).
# 64 connections for DURATION s (default 10) after 3 s of warm-up.
# Environment: BENCH_AUTH=user:password (required: every request carries it), DOCS (default
# 20000), CHAISE_CONFIG as in run.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
DURATION="${DURATION:-10}"
DOCS="${DOCS:-20000}"
: "${BENCH_AUTH:?BENCH_AUTH=user:password is required}"
# shellcheck source=bench/http/lib.sh
source "$here/lib.sh"
bench_server "$1"
workload="${2:-get}"
[[ -n "$server_pid" && -r "/proc/$server_pid/stat" ]] || { echo "no server pid (BENCH_PID)" >&2; exit 2; }
db=benchcpu
curl "${curl_auth[@]}" -s -X DELETE "$base/$db" >/dev/null || true
curl "${curl_auth[@]}" -sf -X PUT "$base/$db" >/dev/null
python3 "$here/load_docs.py" "$base" $db 0 "$DOCS" >/dev/null
conns=64
per_request=1
id_format='d%08d'
case "$workload" in
  put) script="$here/put_new_docs.lua" ;;
  bulk) script="$here/bulk_docs.lua"; conns=4; per_request=1000 ;;
  get) script="$here/get_doc.lua" ;;
  missing) script="$here/get_doc.lua"; id_format='absent%08d' ;;
  local) script="$here/get_doc.lua"; id_format='_local/absent%08d' ;;
  conflict) script="$here/put_conflict.lua" ;;
  anonymous)  # no credentials, on a database only its members may read: a 401
    script="$here/get_doc.lua"
    curl "${curl_auth[@]}" -sf -X PUT "$base/$db/_security" -H 'Content-Type: application/json' \
      -d '{"members":{"roles":["_admin"]}}' >/dev/null
    wrk_auth=() ;;
  denied)
    script="$here/get_doc.lua"
    wrk_auth=(-H "Authorization: Basic $(printf '%s' "${BENCH_AUTH%%:*}:not-the-password" | base64 -w0)") ;;
  up)
    script="$(mktemp /tmp/up-XXXXXX.lua)"
    echo 'function request() return wrk.format("GET", "/_up") end' >"$script" ;;
  *) echo "unknown workload $workload" >&2; exit 2 ;;
esac
export BENCH_DB=$db BENCH_DOCS=$DOCS BENCH_ID_FORMAT=$id_format
wrk "${wrk_auth[@]}" -t2 -c$conns -d3s -s "$script" "$base" >/dev/null
cpu() { awk '{print $14 + $15, $14, $15}' "/proc/$server_pid/stat"; }
read -r t0 u0 s0 < <(cpu)
out="$(wrk "${wrk_auth[@]}" -t2 -c$conns -d"${DURATION}s" --latency -s "$script" "$base")"
read -r t1 u1 s1 < <(cpu)
[[ "$workload" == up ]] && rm -f "$script"
n=$(( $(awk '/requests in/ {print $1}' <<<"$out") * per_request ))
hz=$(getconf CLK_TCK)
rate=$(awk -v k=$per_request '/Requests\/sec/ {print $2 * k}' <<<"$out")
p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
python3 -c "
n, hz = $n, $hz
u, s = ($u1 - $u0) / hz * 1e6 / n, ($s1 - $s0) / hz * 1e6 / n
print(f'$workload: $rate req/s, p99 $p99; server CPU per request: user {u:.1f} us + system {s:.1f} us = {u + s:.1f} us; {($t1 - $t0) / hz / $DURATION:.2f} cores')"
