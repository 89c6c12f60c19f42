#!/usr/bin/env bash
# Runs clients_test.mjs: real PouchDB and nano against a real chaise (see the header of that file),
# or the command given after installing the npm packages (pouchdb_server_replication_test.py).
#
#   CHAISE_BINARY=/path/to/chaise bash tests/interop/run_clients_test.sh [command...]
#
# Needs node and npm. Without them it fails, unless CHAISE_INTEROP_OPTIONAL=1, in which case it
# prints "skipped: node not installed" and exits 77 (CTest's skip). It installs nothing system-wide: the npm
# packages go to tests/interop/node_modules (npm ci from package-lock.json, when node_modules is
# missing or older than the lock file).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [[ "${CHAISE_INTEROP_OPTIONAL:-0}" == "1" ]]; then
    echo "skipped: node not installed"
    exit 77
  fi
  echo "error: node and npm are needed for the interop client test (apt-get install nodejs npm)," \
       "or set CHAISE_INTEROP_OPTIONAL=1 to skip it" >&2
  exit 1
fi

export CHAISE_BINARY="${CHAISE_BINARY:-$here/../../build/server/chaise}"

# node_modules/.package-lock.json is what npm writes after a complete install; reinstall when it is
# missing or the lock file changed since.
# --ignore-scripts: no package's install script runs (pouchdb-server's optional leveldown and
# sqlite3 would build native code; the tests use the in-memory adapters and prebuilt binaries).
if [[ ! -f node_modules/.package-lock.json || ( -f package-lock.json && package-lock.json -nt node_modules/.package-lock.json ) ]]; then
  echo "installing npm packages in $here"
  if [[ -f package-lock.json ]]; then
    timeout 300 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  else
    timeout 300 npm install --ignore-scripts --no-audit --no-fund --loglevel=error
  fi
fi

# The test to run: clients_test.mjs, or the command given (another test that needs these packages).
if [[ $# -gt 0 ]]; then
  exec timeout --kill-after=10 300 "$@"
fi
exec timeout --kill-after=10 240 node "$here/clients_test.mjs"
