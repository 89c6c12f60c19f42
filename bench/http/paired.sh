#!/usr/bin/env bash
# Two server variants running at once, measured in paired windows: A then B, then B then A, and
# so on (ABBA), each window one short wrk run against one of them while the other idles. On a VM
# whose speed drifts by 10-30% within minutes, consecutive windows see nearly the same machine, so
# the ratio of a pair says more than two runs minutes apart (alternate.sh restarts a variant for
# each of its runs instead, for stores of millions of documents).
#
#   bench/http/paired.sh <put|get> <rounds> <a-binary>[:<config.ini>] <b-binary>[:<config.ini>]
#   e.g. BENCH_AUTH=admin:admin bench/http/paired.sh put 8 /tmp/chaise-old build/server/chaise
#
# Each variant gets a fresh store with PRELOAD documents (default 1000; `get` reads them), then
# PREPUT seconds of PUTs if set (tables on disk to read through), then 3 s of warm-up. Prints
# each window's requests/s and the server's CPU per request (user + system from /proc, as
# cpu.sh), and the medians with the median of the pairs' CPU ratios (B / A). Environment:
# BENCH_AUTH (required), WINDOW (s per wrk run, default 5), PRELOAD, PREPUT.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC2034  # lib.sh's start_chaise runs the binary relative to it
root="$(cd "$here/../.." && pwd)"
workload="${1:?put|get}"
rounds="${2:?rounds}"
variant_a="${3:?a-binary}"
variant_b="${4:?b-binary}"
: "${BENCH_AUTH:?BENCH_AUTH=user:password is required}"
WINDOW="${WINDOW:-5}"
PRELOAD="${PRELOAD:-1000}"
case "$workload" in
  get) script="$here/get_doc.lua" ;;
  put) script="$here/put_new_docs.lua" ;;
  *) echo "unknown workload $workload" >&2; exit 2 ;;
esac
# shellcheck source=bench/http/lib.sh
source "$here/lib.sh"
trap - EXIT
pids=()
dirs=()
finish() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  for d in "${dirs[@]}"; do rm -rf "$d"; done
}
trap finish EXIT

bench_server "http://127.0.0.1"  # credentials alone: curl_auth, wrk_auth, BENCH_AUTH_HEADER
export BENCH_DB=bench BENCH_DOCS="$PRELOAD" BENCH_ID_FORMAT='d%08d'
bases=()
# shellcheck disable=SC2034  # CHAISE_BIN and CHAISE_CONFIG are read by lib.sh's start_chaise
for variant in "$variant_a" "$variant_b"; do
  CHAISE_BIN="${variant%%:*}"
  CHAISE_CONFIG=""
  [[ "$variant" == *:* ]] && CHAISE_CONFIG="${variant#*:}"
  datadir="$(mktemp -d /tmp/chaise-paired-XXXXXX)"
  start_chaise
  pids+=("$pid")
  dirs+=("$datadir")
  bases+=("$base")
  curl "${curl_auth[@]}" -sf -X PUT "$base/$BENCH_DB" >/dev/null
  python3 "$here/load_docs.py" "$base" "$BENCH_DB" 0 "$PRELOAD" >/dev/null
  if [[ -n "${PREPUT:-}" ]]; then
    wrk "${wrk_auth[@]}" -t2 -c64 -d"${PREPUT}s" -s "$here/put_new_docs.lua" "$base" >/dev/null
  fi
  wrk "${wrk_auth[@]}" -t2 -c64 -d3s -s "$script" "$base" >/dev/null
done
pid=""
datadir=""

hz=$(getconf CLK_TCK)
window() {  # window <variant index>: prints "<requests/s> <server CPU us per request>"
  local p="${pids[$1]}" t0 t1 rps
  t0=$(cpu_ticks "$p")
  rps=$(wrk "${wrk_auth[@]}" -t2 -c64 -d"${WINDOW}s" -s "$script" "${bases[$1]}" |
        awk '/Requests\/sec/ {print $2}')
  t1=$(cpu_ticks "$p")
  python3 -c "import sys; r=float(sys.argv[1]); print(round(r), round(($t1-$t0)*1e6/$hz/(r*$WINDOW),1))" "$rps"
}
results_a=()
results_b=()
for ((k = 1; k <= rounds; k++)); do
  if ((k % 2)); then a=$(window 0); b=$(window 1); else b=$(window 1); a=$(window 0); fi
  echo "round $k  (req/s, server CPU us/req)  A: $a  B: $b"
  results_a+=("$a")
  results_b+=("$b")
done
python3 - "${results_a[@]}" -- "${results_b[@]}" <<'PY'
import statistics as st, sys
split = sys.argv.index("--")
a = [tuple(map(float, x.split())) for x in sys.argv[1:split]]
b = [tuple(map(float, x.split())) for x in sys.argv[split + 1:]]
print("median A: %.0f req/s, %.1f us/req | B: %.0f req/s, %.1f us/req | B/A CPU per request %.3f"
      % (st.median(x[0] for x in a), st.median(x[1] for x in a), st.median(x[0] for x in b),
         st.median(x[1] for x in b), st.median(y[1] / x[1] for x, y in zip(a, b))))
PY
