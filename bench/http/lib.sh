# bench/http/lib.sh — sourced by run.sh and scale.sh: the server they measure, and its credentials.
#
#   bench_server "$@"   with --chaise: starts build/server/chaise (or $CHAISE_BIN) on a free port
#                       and a temporary data directory (plus CHAISE_CONFIG, read after
#                       config/default.ini), stopped and removed on exit; otherwise $1 is the URL.
#                       Sets base, pid, datadir, server_pid (BENCH_PID for a server not started
#                       here), curl_auth, wrk_auth and exports BENCH_AUTH_HEADER.
#   cpu_ticks PID       the CPU time a process has used (user + system), in CLK_TCK ticks.
# Needs `here` and `root` set by the caller.

pid=""
datadir=""
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  # BENCH_ROCKSDB_LOG=<file>: keep the store's RocksDB LOG (flushes, compactions, stalls) there;
  # bench/http/rocksdb_log.py sums it up per column family.
  if [[ -n "$datadir" && -n "${BENCH_ROCKSDB_LOG:-}" && -f "$datadir/data/store/LOG" ]]; then
    cp "$datadir/data/store/LOG" "$BENCH_ROCKSDB_LOG"
  fi
  if [[ -n "$datadir" ]]; then rm -rf "$datadir"; fi
}
trap cleanup EXIT

start_chaise() {  # starts the server on $datadir/data; sets pid and base
  local fifo="$datadir/out"
  rm -f "$fifo"
  mkfifo "$fifo"
  if [[ -n "${BENCH_AUTH:-}" ]]; then
    COUCHDB_USER="${BENCH_AUTH%%:*}" COUCHDB_PASSWORD="${BENCH_AUTH#*:}" \
      "${CHAISE_BIN:-$root/build/server/chaise}" --port 0 --data-dir "$datadir/data" --config "$root/config/default.ini" ${CHAISE_CONFIG:+--config "$CHAISE_CONFIG"} >"$fifo" 2>>"$datadir/log" &
  else
    "${CHAISE_BIN:-$root/build/server/chaise}" --port 0 --data-dir "$datadir/data" --config "$root/config/default.ini" ${CHAISE_CONFIG:+--config "$CHAISE_CONFIG"} --admin-party >"$fifo" 2>>"$datadir/log" &
  fi
  pid=$!
  local line
  read -r line <"$fifo"
  exec 3<"$fifo"  # keep the pipe open so the server never gets SIGPIPE on stdout
  base="http://127.0.0.1:${line##*:}"
}
stop_chaise() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }  # cpu_ticks <pid>: user + system, in CLK_TCK

bench_server() {
  if [[ "${1:-}" == "--chaise" ]]; then
    datadir="$(mktemp -d /tmp/chaise-bench-XXXXXX)"
    start_chaise
  else
    base="${1:?usage: $(basename "$0") <base-url> | --chaise}"
  fi
  server_pid="${BENCH_PID:-$pid}"
  # Basic auth: curl takes it with -u, wrk and python from a header.
  curl_auth=()
  wrk_auth=()
  local auth_header=""
  if [[ -n "${BENCH_AUTH:-}" ]]; then
    curl_auth=(-u "$BENCH_AUTH")
    auth_header="Basic $(printf '%s' "$BENCH_AUTH" | base64 -w0)"
    wrk_auth=(-H "Authorization: $auth_header")
  fi
  if [[ -n "${BENCH_LOAD_AUTHORIZATION:-}" ]]; then
    auth_header="$BENCH_LOAD_AUTHORIZATION"
    wrk_auth=(-H "Authorization: $auth_header")
  fi
  export BENCH_AUTH_HEADER="$auth_header"
}
