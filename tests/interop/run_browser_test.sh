#!/usr/bin/env bash
# Runs browser_test.mjs: Debian's Chromium (headless) against a real chaise: PouchDB syncing from a
# page on another origin (CORS), and the Fauxton UI at /_utils.
#
#   CHAISE_BINARY=/path/to/chaise bash tests/interop/run_browser_test.sh
#
# Needs node, npm and /usr/bin/chromium (`make test` installs them). Installs the npm packages of
# tests/interop and ui/ (Fauxton) when missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
export CHAISE_BINARY="${CHAISE_BINARY:-$here/../../build/server/chaise}"
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --ignore-scripts --no-audit --no-fund
fi
if [[ ! -f ../../ui/node_modules/pouchdb-fauxton/www/index.html ]]; then
  npm ci --prefix ../../ui --no-audit --no-fund
fi
exec node browser_test.mjs
