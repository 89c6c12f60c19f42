#!/usr/bin/env bash
# HTTP load benchmarks for any CouchDB-compatible server (Chaise, pouchdb-server, CouchDB).
#
#   bench/http/run.sh http://127.0.0.1:5984        # a server that is already running
#   bench/http/run.sh https://127.0.0.1:6984       # HTTPS ([ssl] port; certificates not checked)
#   bench/http/run.sh --chaise                     # starts build/server/chaise (or $CHAISE_BIN)
#                                                  # on a free port with a temporary data dir
#
# Workloads (fsync is whatever the server does; Chaise's default is on):
#   put   single-document PUT of new ~200-byte docs, 64 keep-alive connections      (docs/s)
#   get   GET of existing docs, 64 connections                                        (req/s)
#   bulk  POST _bulk_docs with 1,000-doc batches, 8 connections                       (docs/s)
#   scan  _all_docs and _changes (plain, and with include_docs / style=all_docs&include_docs)
#         of a database of STREAM_DOCS docs, one client                               (rows/s)
#   hot   one counter document: PATCH increments, then a JavaScript update handler's increments
#         (POST _design/u/_update/inc/counter), with 16 and 64 connections (updates/s, p99,
#         final counter vs acknowledged), then CouchDB-style GET+PUT with 16 and 64 clients
#   idem  POST /{db} of new docs, 64 connections: without a key, with a new Idempotency-Key per
#         request, and with every second request a retry of the one before (docs/s, req/s)
#   unique POST /{db} of docs with new emails, 64 connections: no index, a plain Mango index on
#         email, a unique one (req/s); then 64 clients racing to claim 1,000 emails (indexes.py)
#   feeds 200 continuous _changes feeds (since=now) and 500 PUTs sent open-loop, one per 10 ms:
#         from each PUT's acknowledgement to each feed's receipt, p50/p99/max, both the kernel's
#         receive times at the client's sockets (feeds.py ack)
#   disk  (last) the size on disk of a database of STREAM_DOCS docs; see the end of this file
#   sync  POST /{db}, 64 connections, with 0, 1 and 3 synchronous Mango indexes (req/s); then
#         query-after-write latency with a lazy and a synchronous index (indexes.py)
# After each workload it prints the server's resident memory (now, 1 s later and peak, from /proc) when it
# knows the server's pid: its own with --chaise, BENCH_PID=<pid> for a running server (CouchDB's
# beam.smp). The scan workload also prints the database's size on disk (sizes.file).
# Environment: DURATION (s, default 10), STREAM_DOCS (default 1000000), WORKLOADS ("put get bulk scan"),
# SCAN_REPEAT (default 1: each scan once, right after its load; N: the best of N passes),
# CHAISE_CONFIG=<ini file>: with --chaise, read after config/default.ini (e.g. other [chaise] memory
# settings).
# BENCH_AUTH=user:password: Basic auth on every request (with --chaise: that user is the server
# admin; without BENCH_AUTH, --chaise runs in admin party).
# BENCH_LOAD_AUTHORIZATION="Bearer <jwt>": this Authorization header on the load requests instead
# (set-up still uses BENCH_AUTH), e.g. to measure JWT authentication.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
DURATION="${DURATION:-10}"
STREAM_DOCS="${STREAM_DOCS:-1000000}"
WORKLOADS="${WORKLOADS:-put get bulk scan}"
SCAN_REPEAT="${SCAN_REPEAT:-1}"

# shellcheck source=bench/http/lib.sh
source "$here/lib.sh"
bench_server "$@"
# An https URL (Chaise's [ssl] port with a self-signed certificate): curl and python skip
# certificate checks; wrk never checks them.
if [[ "$base" == https://* ]]; then
  curl_auth+=(-k)
  export PYTHONHTTPSVERIFY=0
fi
curl() { command curl "${curl_auth[@]}" "$@"; }
echo "server: $base ($(curl -s "$base/" | head -c 120))"
memory() {  # memory <after what>: the server's RSS now, 1 s later, and its peak so far, in MiB
  [[ -n "$server_pid" && -r "/proc/$server_pid/status" ]] || return 0
  # "Now" is taken as the load client exits, while the server may still be answering its last
  # requests; "1 s later" is the server at rest.
  local now
  now=$(awk '/^VmRSS/ {print $2}' "/proc/$server_pid/status")
  sleep 1
  awk -v what="$1" -v now="$now" '/^VmRSS/ {rss=$2} /^VmHWM/ {hwm=$2}
    END {printf "mem   after %s: RSS %.0f MiB (%.0f 1 s later), peak %.0f MiB\n", what, now/1024, rss/1024, hwm/1024}' \
    "/proc/$server_pid/status"
  # Chaise's own account of the memory it holds by design (absent on CouchDB).
  curl -s "$base/_node/_local/_prometheus" 2>/dev/null | awk -v what="$1" '
    /^chaise_memory_bytes/ {split($1, a, "\""); parts = parts sprintf(" %s %.1f", a[2], $2/1048576)}
    END {if (parts != "") printf "mem   after %s, MiB:%s\n", what, parts}'  || true
}
memory start

j='Content-Type: application/json'
make_db() {
  curl -s -X DELETE "$base/$1" >/dev/null || true
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$base/$1")
  [[ "$code" == 201 ]] || { echo "cannot create $1: HTTP $code" >&2; exit 1; }
}

wrk_rate() {  # prints "<requests/s> <p99 latency>" from wrk's output; failures go to stderr
  local out
  out=$(wrk "${wrk_auth[@]}" --latency "$@")
  grep -E 'Non-2xx|Socket errors' <<<"$out" >&2 || true
  awk '/Requests\/sec/ {r = $2} $1 == "99%" {p = $2} END {print r, p}' <<<"$out"
}

load_docs() {  # load_docs <db>: STREAM_DOCS docs of ~130 bytes through _bulk_docs, 4 clients
  make_db "$1"
  local body="$datadir/bulk.json"
  [[ -n "$datadir" ]] || body="$(mktemp /tmp/bulk-XXXXXX.json)"
  python3 -c "
import json
print(json.dumps({'docs': [{'type': 'row', 'n': i, 'note': 'x' * 100} for i in range(1000)]}))" >"$body"
  local t0 t1
  t0=$(date +%s.%N)
  seq $(( STREAM_DOCS / 1000 )) | xargs -P 4 -I{} curl "${curl_auth[@]}" -sf -o /dev/null -H "$j" -d @"$body" "$base/$1/_bulk_docs"
  t1=$(date +%s.%N)
  [[ -n "$datadir" ]] || rm -f "$body"
  echo "load  $STREAM_DOCS docs via _bulk_docs (4 clients): $(python3 -c "print(round($STREAM_DOCS/($t1-$t0)))") docs/s"
}
db_file_size() {  # db_file_size <db>: sizes.file and sizes.active of the database, in MiB
  curl -s "$base/$1" | python3 -c '
import json, sys
s = json.load(sys.stdin)["sizes"]
print("sizes.file %.1f MiB, sizes.active %.1f MiB" % (s["file"] / 2**20, s["active"] / 2**20))'
}

if [[ " $WORKLOADS " == *" put "* ]]; then
  make_db bench
  r=$(BENCH_DB=bench wrk_rate -t2 -c64 -d"${DURATION}s" -s "$here/put_new_docs.lua" "$base")
  echo "put   single-doc PUT, 64 conns: ${r% *} docs/s, p99 ${r#* }"
  memory put
fi

if [[ " $WORKLOADS " == *" hot "* ]]; then
  # hot_load <label> <lua script> <conns>: the counter document `counter` of a fresh benchhot
  # (with the update handler _design/u/_update/inc) under wrk; the final counter against the
  # acknowledged updates shows whether any was lost.
  hot_load() {
    make_db benchhot
    curl -s -X PUT -H "$j" -d '{"n":0}' "$base/benchhot/counter" >/dev/null
    curl -s -X PUT -H "$j" -d '{"updates":{"inc":"function(doc, req) { doc.n = (doc.n || 0) + 1; return [doc, \"ok\"]; }"}}' \
      "$base/benchhot/_design/u" >/dev/null
    # One call first: the server's JavaScript contexts start with their first use.
    curl -s -X POST "$base/benchhot/_design/u/_update/inc/warm" >/dev/null
    local out total bad rate p99 n
    out=$(BENCH_DB=benchhot BENCH_DOC=counter wrk "${wrk_auth[@]}" -t2 -c"$3" -d"${DURATION}s" --latency \
          -s "$here/$2" "$base" 2>&1) || true
    total=$(awk '/requests in/ {print $1}' <<<"$out")
    bad=$(awk '/Non-2xx/ {print $5}' <<<"$out")
    rate=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    n=$(curl -s "$base/benchhot/counter" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("n"))')
    echo "hot   $1, one doc, $3 conns: $rate req/s, p99 $p99, ${total:-0} answered, ${bad:-0} not 2xx, counter $n"
  }
  for conns in 16 64; do hot_load "PATCH increment" patch_counter.lua "$conns"; done
  for conns in 16 64; do hot_load "update handler increment" update_counter.lua "$conns"; done
  for clients in 16 64; do
    make_db benchhot
    curl -s -X PUT -H "$j" -d '{"n":0}' "$base/benchhot/counter" >/dev/null
    echo "hot   $(python3 "$here/get_put_counter.py" "$base" benchhot counter "$clients" "$DURATION")"
  done
  memory hot
fi

if [[ " $WORKLOADS " == *" idem "* ]]; then
  for mode in none unique retry; do
    make_db benchidem
    r=$(BENCH_DB=benchidem IDEM_MODE=$mode wrk_rate -t2 -c64 -d"${DURATION}s" -s "$here/post_idempotent.lua" "$base")
    docs=$(curl -s "$base/benchidem" | python3 -c 'import json,sys; print(json.load(sys.stdin)["doc_count"])')
    echo "idem  POST /db, Idempotency-Key $mode, 64 conns: ${r% *} req/s, p99 ${r#* }, $docs docs written"
  done
  memory idem
fi

if [[ " $WORKLOADS " == *" unique "* ]]; then
  for mode in none index unique; do
    make_db benchuniq
    note=""
    case $mode in
      index) def='{"index":{"fields":["email"]},"name":"email"}' ;;
      unique) def='{"index":{"fields":["email"]},"name":"email","unique":true}' ;;
    esac
    if [[ $mode != none ]]; then
      code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "$j" -d "$def" "$base/benchuniq/_index")
      [[ $code == 200 ]] || { echo "unique index: $mode refused (HTTP $code)"; continue; }
    fi
    r=$(BENCH_DB=benchuniq wrk_rate -t2 -c64 -d"${DURATION}s" -s "$here/post_email.lua" "$base")
    echo "unique POST /db, new emails, 64 conns, index: $mode: ${r% *} req/s, p99 ${r#* }"
  done
  python3 "$here/indexes.py" "$base" race 64 1000 "$DURATION"
  memory unique
fi

if [[ " $WORKLOADS " == *" sync "* ]]; then
  for n in 0 1 3; do
    make_db benchsync
    refused=""
    for field in sensor unit value; do
      [[ $n == 0 || ( $n == 1 && $field != sensor ) ]] && continue
      code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H "$j" \
        -d "{\"index\":{\"fields\":[\"$field\"]},\"sync_index\":true}" "$base/benchsync/_index")
      [[ $code == 200 ]] || refused=1
    done
    [[ -z $refused ]] || { echo "sync  synchronous indexes refused (HTTP $code)"; continue; }
    r=$(BENCH_DB=benchsync IDEM_MODE=none wrk_rate -t2 -c64 -d"${DURATION}s" -s "$here/post_idempotent.lua" "$base")
    echo "sync  POST /db, 64 conns, $n synchronous indexes: ${r% *} req/s, p99 ${r#* }"
  done
  python3 "$here/indexes.py" "$base" after-write lazy 500
  python3 "$here/indexes.py" "$base" after-write sync 500
  memory sync
fi

if [[ " $WORKLOADS " == *" get "* ]]; then
  make_db benchget
  python3 - "$base" <<'PY'
import json, ssl, sys, urllib.request
base = sys.argv[1]
if base.startswith("https://"):
    ssl._create_default_https_context = ssl._create_unverified_context
docs = [{"_id": "d%06d" % i, "value": i, "note": "x" * 150} for i in range(1000)]
import os
headers = {"Content-Type": "application/json"}
if os.environ.get("BENCH_AUTH_HEADER"):
    headers["Authorization"] = os.environ["BENCH_AUTH_HEADER"]
req = urllib.request.Request(base + "/benchget/_bulk_docs", json.dumps({"docs": docs}).encode(),
                             headers)
urllib.request.urlopen(req).read()
PY
  r=$(BENCH_DB=benchget BENCH_DOCS=1000 wrk_rate -t2 -c64 -d"${DURATION}s" -s "$here/get_doc.lua" "$base")
  echo "get   GET existing doc, 64 conns: ${r% *} req/s, p99 ${r#* }"
  memory get
fi

if [[ " $WORKLOADS " == *" bulk "* ]]; then
  make_db benchbulk
  r=$(BENCH_DB=benchbulk wrk_rate -t2 -c4 -d"${DURATION}s" --timeout 30s -s "$here/bulk_docs.lua" "$base")
  echo "bulk  _bulk_docs x1000, 4 conns: $(python3 -c "print(round(float('${r% *}')*1000))") docs/s, p99 ${r#* }"
  memory bulk
fi

if [[ " $WORKLOADS " == *" scan "* ]]; then
  load_docs benchscan
  for view in _all_docs "_all_docs?include_docs=true" _changes "_changes?style=all_docs&include_docs=true"; do
    out="$(mktemp /tmp/scan-XXXXXX.json)"
    best=""
    for ((pass = 0; pass < SCAN_REPEAT; pass++)); do
      t0=$(date +%s.%N)
      curl -sf "$base/benchscan/$view" -o "$out"
      t1=$(date +%s.%N)
      best=$(python3 -c "print(min(x for x in [$t1-$t0, ${best:-1e9}]))")
    done
    n=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(len(d.get('rows', d.get('results', []))))" "$out")
    rm -f "$out"
    of=""
    [[ "$SCAN_REPEAT" == 1 ]] || of=" (best of $SCAN_REPEAT)"
    echo "scan  $view: $n rows in $(python3 -c "print(round($best,2))") s = $(python3 -c "print(round($n/$best))") rows/s$of"
  done
  memory scan
fi

if [[ " $WORKLOADS " == *" feeds "* ]]; then
  python3 "$here/feeds.py" ack "$base" --feeds 200 --writes 500 --interval-ms 10
  memory feeds
fi

# Last, because it restarts (and with --chaise finally stops) the server: the size on disk of a
# database of STREAM_DOCS docs. With --chaise: the whole data directory, after a restart (which
# moves the write-ahead log into table files) and 10 s for compactions; run it alone (WORKLOADS=disk)
# so no other database is in it. Otherwise the server's sizes.file.
if [[ " $WORKLOADS " == *" disk "* ]]; then
  load_docs benchdisk
  echo "disk  $STREAM_DOCS docs: $(db_file_size benchdisk)"
  if [[ -n "$pid" ]]; then
    stop_chaise
    start_chaise
    server_pid=$pid
    sleep 10
    memory "restart (idle)"
    stop_chaise
    [[ -z "${BENCH_LIST_FILES:-}" ]] || ls -l "$datadir/data"/*/ >&2
    echo "disk  $STREAM_DOCS docs: data directory after restart: $(du -sm "$datadir/data" | cut -f1) MiB"
  fi
fi
