#!/usr/bin/env bash
# Attachment throughput of any CouchDB-compatible server (Chaise, CouchDB), measured with curl.
#
#   bench/http/attachments.sh http://admin:admin@127.0.0.1:5984   # a server that is already running
#   bench/http/attachments.sh --chaise                            # starts build/server/chaise (or
#                                                                 # $CHAISE_BIN) on a free port with a
#                                                                 # temporary data dir
#
# For each size (1 MiB and 100 MiB of random bytes), REPS times: PUT /bench_att/<new doc>/blob
# (application/octet-stream, streamed from a file with curl -T, no "Expect: 100-continue") and then GET
# of that attachment to /dev/null. Rate = size / curl's %{time_total} (connect included), median of the
# repetitions, in MiB/s (1 MiB = 1,048,576 bytes). Every upload must answer 201 and every download must
# return the full size; one download per size is checked byte for byte (md5) outside the timing.
#
# Peak RSS: while the 100 MiB uploads run, and again while the 100 MiB downloads run, the server's
# VmHWM (/proc/<pid>/status) is reset first (echo 5 > /proc/<pid>/clear_refs, Linux >= 4.0; root or
# the server's owner) and read afterwards; VmRSS is also sampled every ~20 ms as a cross-check. The
# pid is the process listening on the URL's port (for CouchDB that is beam.smp), or $SERVER_PID.
#
# --chaise starts the server with config/default.ini as it is: attachment uploads over 1 MiB stream
# into storage, so max_http_request_size (64 MiB) does not bound them. CouchDB's defaults
# (max_http_request_size 4 GiB, max_attachment_size unlimited) need no change either.
# Environment: REPS_SMALL (default 7), REPS_LARGE (default 3), SIZES_MIB ("1 100").
# The database bench_att is deleted at the end.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
REPS_SMALL="${REPS_SMALL:-7}"
REPS_LARGE="${REPS_LARGE:-3}"
SIZES_MIB="${SIZES_MIB:-1 100}"
DB=bench_att

pid=""
base=""
work="$(mktemp -d /tmp/chaise-attbench-XXXXXX)"
sampler=""
cleanup() {
  if [[ -n "$sampler" ]]; then kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; fi
  if [[ -n "$base" ]]; then curl -s -o /dev/null -X DELETE "$base/$DB" || true; fi
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [[ "${1:-}" == "--chaise" ]]; then
  cp "$root/config/default.ini" "$work/chaise.ini"
  fifo="$work/out"
  mkfifo "$fifo"
  "${CHAISE_BIN:-$root/build/server/chaise}" --port 0 --data-dir "$work/data" --config "$work/chaise.ini" --admin-party >"$fifo" 2>"$work/log" &
  pid=$!
  read -r line <"$fifo"
  exec 3<"$fifo"  # keep the pipe open so the server never gets SIGPIPE on stdout
  port="${line##*:}"
  base="http://127.0.0.1:$port"
  server_pid="$pid"
else
  base="${1:?usage: attachments.sh <base-url> | --chaise}"
  base="${base%/}"
  hostport="${base#*://}"; hostport="${hostport#*@}"; hostport="${hostport%%/*}"
  port="${hostport##*:}"
  server_pid="${SERVER_PID:-$(ss -ltnpH "sport = :$port" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)}"
fi
echo "server: ${base#*@} ($(curl -s "$base/" | head -c 120))"
if [[ -n "${server_pid:-}" && -r "/proc/$server_pid/status" ]]; then
  echo "server pid: $server_pid ($(cat "/proc/$server_pid/comm")), VmRSS now $(awk '/^VmRSS/ {print $2}' "/proc/$server_pid/status") kB"
else
  echo "server pid: unknown (no RSS figures)"; server_pid=""
fi

curl -s -o /dev/null -X DELETE "$base/$DB" || true
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$base/$DB")
[[ "$code" == 201 ]] || { echo "cannot create $DB: HTTP $code" >&2; exit 1; }

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
kb() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$server_pid/status"; }

rss_begin() {  # reset the peak, start sampling VmRSS into $work/rss
  [[ -n "$server_pid" ]] || return 0
  hwm_reset=yes
  echo 5 2>/dev/null >"/proc/$server_pid/clear_refs" || hwm_reset=no
  rss_base=$(kb VmRSS)
  : >"$work/rss"
  (
    while [[ -r "/proc/$server_pid/status" ]]; do
      while read -r k v _; do [[ "$k" == VmRSS: ]] && echo "$v" && break; done <"/proc/$server_pid/status"
      sleep 0.02
    done
  ) >>"$work/rss" &
  sampler=$!
}
rss_end() {  # prints "<what>: ..." with the peaks in MiB
  [[ -n "$server_pid" ]] || return 0
  kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; sampler=""
  local hwm sampled
  hwm=$(kb VmHWM)
  sampled=$(sort -g "$work/rss" | tail -1)
  if [[ "$hwm_reset" == yes ]]; then
    printf '      peak RSS during %s: VmHWM %.0f MiB (RSS before %.0f MiB, %+d MiB); sampled VmRSS max %.0f MiB\n' \
      "$1" "$(bc -l <<<"$hwm/1024")" "$(bc -l <<<"$rss_base/1024")" "$(( (hwm - rss_base) / 1024 ))" "$(bc -l <<<"${sampled:-0}/1024")"
  else
    printf '      peak RSS during %s: (VmHWM not resettable) sampled VmRSS max %.0f MiB (RSS before %.0f MiB)\n' \
      "$1" "$(bc -l <<<"${sampled:-0}/1024")" "$(bc -l <<<"$rss_base/1024")"
  fi
}

for mib in $SIZES_MIB; do
  bytes=$(( mib * 1048576 ))
  file="$work/blob_$mib"
  head -c "$bytes" /dev/urandom >"$file"
  sum=$(md5sum <"$file" | cut -d' ' -f1)
  reps=$REPS_SMALL; (( mib < 10 )) || reps=$REPS_LARGE
  big=no; (( mib < 10 )) || big=yes

  [[ "$big" == yes ]] && rss_begin
  up=()
  for i in $(seq "$reps"); do
    out=$(curl -s -o "$work/resp" -w '%{http_code} %{time_total} %{size_upload}' --max-time 600 -X PUT \
      -H 'Content-Type: application/octet-stream' -H 'Expect:' -T "$file" "$base/$DB/a${mib}_$i/blob")
    read -r code t sent <<<"$out"
    if [[ "$code" != 201 ]]; then
      echo "upload of $mib MiB failed: HTTP $code $(head -c 300 "$work/resp")" >&2; exit 1
    fi
    up+=("$(bc -l <<<"$bytes/1048576/$t")")
  done
  [[ "$big" == yes ]] && rss_end "the ${mib} MiB uploads" >>"$work/rsslog"

  [[ "$big" == yes ]] && rss_begin
  down=()
  for i in $(seq "$reps"); do
    out=$(curl -s -o /dev/null -w '%{http_code} %{time_total} %{size_download}' --max-time 600 "$base/$DB/a${mib}_$i/blob")
    read -r code t got <<<"$out"
    if [[ "$code" != 200 || "$got" != "$bytes" ]]; then
      echo "download of $mib MiB failed: HTTP $code, $got of $bytes bytes" >&2; exit 1
    fi
    down+=("$(bc -l <<<"$bytes/1048576/$t")")
  done
  [[ "$big" == yes ]] && rss_end "the ${mib} MiB downloads" >>"$work/rsslog"

  got_sum=$(curl -s "$base/$DB/a${mib}_1/blob" | md5sum | cut -d' ' -f1)
  [[ "$got_sum" == "$sum" ]] || { echo "download of $mib MiB differs from the upload (md5 $got_sum != $sum)" >&2; exit 1; }

  fmt() { printf '%s\n' "$@" | median | xargs printf '%.1f'; }
  all() { printf '%s\n' "$@" | xargs printf '%.1f ' | sed 's/ $//'; }
  echo "att   PUT ${mib} MiB: median $(fmt "${up[@]}") MiB/s  (${reps} reps: $(all "${up[@]}"))"
  echo "att   GET ${mib} MiB: median $(fmt "${down[@]}") MiB/s  (${reps} reps: $(all "${down[@]}"))"
  if [[ -s "$work/rsslog" ]]; then cat "$work/rsslog"; : >"$work/rsslog"; fi
  rm -f "$file"
done
