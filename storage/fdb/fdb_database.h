// storage/fdb/fdb_database.h — the FoundationDB engine: storage/'s Database and Transaction over a
// FoundationDB cluster, through FoundationDB's C client (libfdb_c), loaded at run time so that
// Chaise builds and runs without FoundationDB installed.
//
//   FdbOptions o;
//   o.cluster_file = "/etc/foundationdb/fdb.cluster";
//   auto db = open_foundationdb(o);     // Result<std::unique_ptr<Database>>
//   Status s = (*db)->run([&](Transaction& tr) -> Status { ... });
//
// Every Database opened so in one process shares the process's one FoundationDB network (one
// thread; fdb_network.h). Several processes, or several Database objects of one process, on one
// cluster see one store: that is how several Chaise nodes serve the same databases.
//
// The transaction contract is storage/transaction.h's, call for call on FoundationDB's own
// (read-your-writes, snapshot reads, range conflicts, atomic ops, versionstamps, watches, its
// limits and error codes). Where this engine differs from the embedded one:
// - commit_unknown_result (1021) can happen at any commit: may_commit_unknown_result() is true.
// - The 5-second transaction lifetime is FoundationDB's own (transaction_too_old, 1007); past
//   FdbOptions::transaction_timeout_ms a transaction fails with transaction_timed_out (1031), so a
//   lost cluster fails requests instead of hanging them.
// - on_error() and prepare_retry() wait FoundationDB's own backoff (fdb_transaction_on_error)
//   before returning; prepare_retry() then returns a zero backoff.
// - commit_async's callback and watch callbacks run on FoundationDB's network thread: they must
//   not block, and must not call a blocking storage method.
// - The metadata generation (Transaction::touch_metadata) is FoundationDB's metadata version, the
//   key \xff/metadataVersion: a commit that touches metadata sets it to its versionstamp, so every
//   process sees the generation move with the commit. snapshot_metadata_generation() reads it (no
//   read conflict) and answers twice its commit version (0 when never set): even, and greater for
//   every later metadata commit. A transaction that touches metadata gets nullopt.
// - instance_id() is a random number stored once in the store (FdbOptions::instance_id_key):
//   every handle on one cluster (and key prefix) answers the same.
// - stats(): commits and conflicts of this handle; the other counters are 0. compact_files()
//   succeeds at once (FoundationDB's storage servers compact on their own).
//   set_commit_fault_hook() is ignored: fault injection is the embedded engine's.
// - Database::options() answers the embedded engine's defaults, with run_attempts_max and
//   transaction_size_limit from FdbOptions.
// - A transaction's adds of one width to one key reach the cluster as one add of their sum, handed over
//   when the transaction next reads or writes that key, or commits (fewer mutations through the
//   client's one network thread; the same values, conflicts and read-your-writes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "storage/database.h"

namespace chaise::storage {

struct FdbOptions {
  // The client library to load: a path, or a file name the dynamic linker finds (its search path,
  // LD_LIBRARY_PATH). Default "libfdb_c.so" (FoundationDB's client packages install it in
  // /usr/lib). The first open of a process decides it for the process.
  std::string library = "libfdb_c.so";
  // The cluster file. Empty: FoundationDB's default (FDB_CLUSTER_FILE, else
  // /etc/foundationdb/fdb.cluster). Default empty.
  std::string cluster_file;
  // The API version to select, in [710, 730]. Default 730 (FoundationDB 7.3). The first open of a
  // process decides it for the process.
  int api_version = 730;
  // Each transaction's time limit, ms, across its retries (FoundationDB's transaction timeout):
  // past it the transaction fails with transaction_timed_out (1031). 0 = none. Default 10,000.
  std::int64_t transaction_timeout_ms = 10'000;
  // Retries on_error() grants a transaction before it returns the error instead (FoundationDB's
  // transaction retry limit). -1 = no limit but the timeout. Default -1.
  std::int64_t transaction_retry_limit = -1;
  // The longest backoff on_error() waits, ms (FoundationDB's max retry delay). Default 1,000.
  std::int64_t transaction_max_retry_delay_ms = 1'000;
  // Bytes a transaction may write, with its conflict ranges (FoundationDB's size limit), at most
  // kTransactionSizeMax. Default 10,000,000.
  std::int64_t transaction_size_limit_bytes = 10'000'000;
  // Every key this handle reads and writes lives under this prefix, which its callers do not see
  // (as a FoundationDB directory): several independent stores on one cluster, such as one per
  // test. Keys are limited to kKeySizeMax with the prefix. Default empty: the whole keyspace.
  std::string key_prefix;
  // FoundationDB's client knob future_version_retry_delay, in microseconds: how long the client
  // waits before asking again whether a version is committed. A watch fires only once the
  // changing commit's version is known committed, and the storage server often sees the change
  // first, so this is how late a write made by another process can wake a feed (the default,
  // FoundationDB's 10,000, put 10 ms into 1-2% of the wakes measured by bench/http/nodes.py; 300
  // none). The same delay, not growing, is the backoff before retrying transaction_too_old and
  // future_version, which a low value makes faster against a recovering cluster. In
  // [1, 1,000,000]; default 10,000. The first open of a process decides it for the process.
  std::int64_t future_version_retry_delay_us = 10'000;
  // Watches this handle may have waiting at once (FoundationDB's max_watches, at most
  // 1,000,000); one more fails with too_many_watches. Default 100,000: FoundationDB's own 10,000
  // is one live feed on each of 10,000 databases (couch_peruser with live sync).
  std::int64_t max_watches = 100'000;
  // Attempts Database::run() makes before giving up with the last error. Default 100,000.
  int run_attempts_max = 100'000;
  // The key holding the store's instance id (Transaction::instance_id), as the cluster names it
  // (key_prefix does not apply). Empty (default): the packed tuple ("chaise", "instance_id"),
  // outside the integer-named subspaces of core's keyspace; with a key_prefix, the prefix followed
  // by "\xff/instance_id", beyond the keys the handle shows, so that a new prefix's store is empty.
  std::string instance_id_key;
};

// Opens a handle on the cluster of options.cluster_file, starting the process's FoundationDB
// network on the first call, and reads (or on a new cluster stores) the instance id. Errors:
// invalid_option_value (an option out of range, or a library or API version other than the
// process's first open), io_error (libfdb_c cannot be loaded or the network not started; *why,
// when given, says why), transaction_timed_out (the cluster did not answer within
// transaction_timeout_ms), or FoundationDB's error from creating the handle.
Result<std::unique_ptr<Database>> open_foundationdb(const FdbOptions& options,
                                                    std::string* why = nullptr);

}  // namespace chaise::storage
