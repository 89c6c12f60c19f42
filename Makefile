# Chaise build entry points. On a fresh Debian 12 machine, as root: `make run` or `make test`.
# Every target installs what is missing first (`deps` is a no-op when all packages are present).

SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -euo pipefail -c
.PHONY: deps interop-deps browser-deps fuzz-deps format-deps ui install build run test test-foundationdb asan tsan fuzz bench \
        format format-check tidy

# Debian 12 packages needed to build and test.
PACKAGES := build-essential cmake ccache libboost-all-dev nlohmann-json3-dev libspdlog-dev \
            libssl-dev zlib1g-dev librocksdb-dev googletest libgtest-dev libbenchmark-dev \
            libmozjs-102-dev libicu-dev libre2-dev libpcre2-dev libjemalloc-dev pkg-config openssl curl \
            lld
JOBS ?= $(shell nproc)
BUILD_TYPE ?= RelWithDebInfo

# apt only runs when `dpkg -s` says something is missing, so this is fast and works offline
# once everything is installed.
deps:
	@if dpkg -s $(PACKAGES) >/dev/null 2>&1; then exit 0; fi
	if [ "$$(id -u)" -ne 0 ]; then
	  echo "make deps: missing packages; run as root (or: sudo apt-get install -y $(PACKAGES))" >&2
	  exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y --no-install-recommends $(PACKAGES)

# The interop tests (tests/interop/) need node, npm and python3; installed from Debian when one
# of them is missing (a node from elsewhere is kept).
interop-deps:
	@if command -v node >/dev/null && command -v npm >/dev/null && command -v python3 >/dev/null; then exit 0; fi
	if [ "$$(id -u)" -ne 0 ]; then
	  echo "make interop-deps: node, npm or python3 missing; run as root (or: sudo apt-get install -y nodejs npm python3)" >&2
	  exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y --no-install-recommends nodejs npm python3

# The browser test (tests/interop/browser_test.mjs) drives Debian's Chromium headless.
browser-deps:
	@if [ -x /usr/bin/chromium ]; then exit 0; fi
	if [ "$$(id -u)" -ne 0 ]; then
	  echo "make browser-deps: chromium missing; run as root (or: sudo apt-get install -y chromium)" >&2
	  exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y --no-install-recommends chromium

# The web UI at /_utils: Fauxton from npm (ui/package.json), installed once.
ui: interop-deps
	@if [ -f ui/node_modules/pouchdb-fauxton/www/index.html ]; then exit 0; fi
	npm ci --prefix ui --no-audit --no-fund

build: deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)
	cmake --build build -j$(JOBS)

# The first run creates the server admin 'admin' with a random password, prints it once and keeps
# its hash in data/local.ini (COUCHDB_USER/COUCHDB_PASSWORD in the environment name one instead).
run: build ui
	mkdir -p data
	exec build/server/chaise --config config/default.ini --config data/local.ini --data-dir ./data --create-admin

# As root: the binary, the web UI, /etc/chaise/chaise.ini (kept when it exists) and the systemd
# unit; then `systemctl daemon-reload && systemctl enable --now chaise`.
PREFIX ?= /usr/local
install: build ui
	install -D -m 0755 build/server/chaise $(DESTDIR)$(PREFIX)/bin/chaise
	mkdir -p $(DESTDIR)$(PREFIX)/share/chaise
	rm -rf $(DESTDIR)$(PREFIX)/share/chaise/www
	cp -r ui/node_modules/pouchdb-fauxton/www $(DESTDIR)$(PREFIX)/share/chaise/www
	if [ ! -f $(DESTDIR)/etc/chaise/chaise.ini ]; then
	  mkdir -p $(DESTDIR)/etc/chaise
	  sed -e 's|^database_dir = .*|database_dir = /var/lib/chaise|' \
	      -e 's|^fauxton_dir = .*|fauxton_dir = $(PREFIX)/share/chaise/www|' \
	      config/default.ini > $(DESTDIR)/etc/chaise/chaise.ini
	fi
	sed 's|/usr/local/bin/chaise|$(PREFIX)/bin/chaise|' systemd/chaise.service > chaise.service.tmp
	install -D -m 0644 chaise.service.tmp $(DESTDIR)/etc/systemd/system/chaise.service
	rm -f chaise.service.tmp

# The fuzzers run 10 s each here (every corpus entry is replayed first); `make fuzz` runs longer.
TEST_FUZZ_SECONDS ?= 10
# A test whose optional service is absent (CouchDB for the replication interop test) is reported
# as skipped, and the count is printed last.
test: build interop-deps browser-deps
	ctest --test-dir build --output-on-failure -j2 | tee build/ctest.log
	echo "ctest: $$(grep -c '(Skipped)$$' build/ctest.log || true) test(s) skipped"
	$(MAKE) fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS)

# The HTTP suite again with every server it starts on FoundationDB (tests/http/test_server.h),
# each in a key prefix of its own: needs CHAISE_FDB_CLUSTER_FILE and CHAISE_FDB_LIBRARY (README,
# "Tests against FoundationDB"). The multi-node tests run on FoundationDB in `make test` already.
test-foundationdb: build
	@if [ -z "$${CHAISE_FDB_CLUSTER_FILE:-}" ] || [ -z "$${CHAISE_FDB_LIBRARY:-}" ]; then
	  echo "make test-foundationdb: set CHAISE_FDB_CLUSTER_FILE and CHAISE_FDB_LIBRARY" >&2; exit 2
	fi
	CHAISE_TEST_STORAGE_ENGINE=foundationdb ctest --test-dir build/tests/http --output-on-failure \
	  -j2 -E '^MultiNodeTest' | tee build/ctest-foundationdb.log

# libFuzzer (tests/fuzz/) needs Debian's clang and its runtime libraries.
FUZZ_PACKAGES := clang libclang-rt-14-dev
fuzz-deps:
	@if dpkg -s $(FUZZ_PACKAGES) >/dev/null 2>&1; then exit 0; fi
	if [ "$$(id -u)" -ne 0 ]; then
	  echo "make fuzz-deps: missing packages; run as root (or: sudo apt-get install -y $(FUZZ_PACKAGES))" >&2
	  exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y --no-install-recommends $(FUZZ_PACKAGES)

# Every libFuzzer target (ASan+UBSan) for FUZZ_SECONDS from its corpus in tests/fuzz/corpus/;
# a crash, leak or slow input fails the run and leaves the input in build-fuzz/. New corpus
# entries go to a scratch directory (the checked-in corpus changes only by hand).
FUZZ_SECONDS ?= 30
FUZZ_TARGETS := fuzz_json_doc fuzz_rev fuzz_tuple fuzz_sequence fuzz_request_target \
                fuzz_selector fuzz_multipart fuzz_jwt fuzz_rev_delta fuzz_json_patch
fuzz: deps fuzz-deps
	cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCHAISE_FUZZ=ON -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)
	cmake --build build-fuzz -j$(JOBS)
	# One target: its corpus replayed, then FUZZ_SECONDS of new inputs; $(JOBS) targets at a time.
	fuzz_one() {
	  local t="$$1" scratch
	  scratch="$$(mktemp -d)"
	  mkdir -p "tests/fuzz/corpus/$$t"
	  if ! (cd build-fuzz && ./tests/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	         -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
	         "$$scratch" "$(CURDIR)/tests/fuzz/corpus/$$t") >"$$scratch.log" 2>&1; then
	    tail -60 "$$scratch.log"
	    echo "fuzz: $$t failed (the input is in build-fuzz/)" >&2
	    return 1
	  fi
	  echo "$$t: $$(grep -E '^stat::number_of_executed_units' "$$scratch.log" | tr -s ' ') in $(FUZZ_SECONDS) s"
	  rm -rf "$$scratch" "$$scratch.log"
	}
	export -f fuzz_one
	printf '%s\n' $(FUZZ_TARGETS) | xargs -P $(JOBS) -n 1 bash -c 'fuzz_one "$$1"' fuzz

# tests/lsan.supp: what FoundationDB's client library keeps until exit (the FoundationDB tests).
asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCHAISE_SANITIZE=address -DCHAISE_BENCH=OFF
	cmake --build build-asan -j$(JOBS)
	LSAN_OPTIONS="suppressions=$(CURDIR)/tests/lsan.supp $(LSAN_OPTIONS)" \
	  ctest --test-dir build-asan --output-on-failure -j2

# tests/tsan.supp: what the uninstrumented RocksDB hides from TSan; a longer history so the
# earlier access of a report keeps its stack (and the suppressions can see it). Accesses that
# uninstrumented libraries make through interceptors (RocksDB copying a block it shares with
# another of its threads, through libstdc++'s string append) are ignored: their synchronisation
# is invisible, and their stacks, all inside those libraries, give a suppression nothing to match.
tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCHAISE_SANITIZE=thread -DCHAISE_BENCH=OFF
	cmake --build build-tsan -j$(JOBS)
	TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp history_size=7 ignore_noninstrumented_modules=1 $(TSAN_OPTIONS)" \
	  ctest --test-dir build-tsan --output-on-failure -j2

# Runs every executable that the bench/ directory builds, one after the other.
bench: build
	@found=0
	for exe in build/bench/*; do
	  if [ -f "$$exe" ] && [ -x "$$exe" ]; then
	    found=1
	    echo "== $$exe"
	    "$$exe"
	  fi
	done
	if [ "$$found" -eq 0 ]; then echo "no benchmark executables in build/bench/" >&2; exit 1; fi

# clang-format (.clang-format at the root) over every C++ file git tracks. CI runs format-check.
format-deps:
	@if command -v clang-format >/dev/null; then exit 0; fi
	if [ "$$(id -u)" -ne 0 ]; then
	  echo "make format-deps: clang-format missing; run as root (or: sudo apt-get install -y clang-format)" >&2
	  exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update
	apt-get install -y --no-install-recommends clang-format

format: format-deps
	git ls-files -z '*.cc' '*.h' | xargs -0 clang-format -i

format-check: format-deps
	git ls-files -z '*.cc' '*.h' | xargs -0 clang-format --dry-run -Werror

# clang-tidy (.clang-tidy at the root) over the product sources (not tests, benchmarks or fuzzers).
# It reads build-tidy/compile_commands.json, configured without unity batches so that each file is
# checked as itself. Boost 1.74's Asio only enables co_await for GCC, so clang is told that it has
# coroutines too. core/js/js.cc is left out: SpiderMonkey 102's headers need a newer clang.
tidy: deps format-deps
	@if ! command -v run-clang-tidy >/dev/null; then
	  if [ "$$(id -u)" -ne 0 ]; then echo "make tidy: run-clang-tidy missing; run as root (or: sudo apt-get install -y clang-tidy)" >&2; exit 1; fi
	  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends clang-tidy
	fi
	cmake -S . -B build-tidy -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCHAISE_UNITY=OFF >/dev/null
	run-clang-tidy -quiet -p build-tidy -j$(JOBS) \
	  -extra-arg=-DBOOST_ASIO_HAS_CO_AWAIT=1 -extra-arg=-DBOOST_ASIO_HAS_STD_COROUTINE=1 \
	  -extra-arg=-include -extra-arg=utility -extra-arg=-Wno-unknown-warning-option \
	  '^$(CURDIR)/(core/(batch|db|docs|index|query|rev|security|util)|http/(api|auth|transport)|storage|server|config)/[a-z_]+\.cc$$'
