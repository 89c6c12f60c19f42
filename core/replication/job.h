// core/replication/job.h — one replication run: CouchDB's replication protocol from a source
// Endpoint to a target Endpoint.
//
// The run, as couch_replicator_scheduler_job does it:
//   1. open both databases (creating the target with create_target), fetch the filter's code,
//      compute the replication id;
//   2. read the checkpoints _local/<id> on both sides and start from the newest sequence both
//      remember (the same session, or the latest session found in both histories);
//   3. repeat: read up to worker_batch_size changes of the source (style=all_docs, the filter),
//      ask the target which of their revisions it lacks (_revs_diff), fetch those revisions with
//      their history and the attachments the target's revisions lack (_bulk_get), write them with
//      new_edits=false (_bulk_docs); a revision the target refuses counts in doc_write_failures
//      and the run goes on;
//   4. checkpoint every checkpoint_interval and at the end: the sequence through which every
//      change is written, in CouchDB's history format on both sides.
// worker_processes batches are in flight at once, each on a thread of its own with its own
// endpoints; the checkpoint records the sequence before the oldest batch still in flight, so a
// run stopped at any point resumes without missing a change.
//
// A one-shot run ends when it has read the changes the source had when the run started; a
// continuous one waits for more (longpoll) until stop(). Errors end the run with a reason; the
// scheduler decides whether to retry.
//
// Threading: run() on one thread; stop() and status() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/replication/endpoint.h"
#include "core/replication/spec.h"

namespace chaise::core::replication {

struct JobStats {
  std::int64_t revisions_checked = 0;
  std::int64_t missing_revisions_found = 0;
  std::int64_t docs_read = 0;
  std::int64_t docs_written = 0;
  std::int64_t doc_write_failures = 0;
  std::optional<std::int64_t> changes_pending;
  Json checkpointed_source_seq = 0;
  Json source_seq = 0;
  Json through_seq = 0;
};

// How a run ended.
struct JobOutcome {
  bool ok = false;
  // ok: the answer POST /_replicate gives a one-shot ({"ok", "session_id", "source_last_seq",
  // "replication_id_version", "history"}).
  Json result;
  // !ok: why, as CouchDB words it, and whether retrying can help (a missing database cannot).
  std::string reason;
  bool permanent = false;
  // !ok before the replication was defined (its filter could not be fetched): a _replicator
  // document is then in "error", not "failed".
  bool undefined = false;
};

class ReplicationJob {
 public:
  ReplicationJob(ReplicationSpec spec, EndpointFactory& endpoints, std::string server_uuid);
  ~ReplicationJob();

  // The replication id computed without fetching a filter's code (the id of a design-document
  // filter's job is known only once run() has fetched it).
  static ReplicationId early_id(const ReplicationSpec& spec, std::string_view server_uuid);

  JobOutcome run();
  // Ends run() soon: at the next call to an endpoint, which is cancelled if in progress. A
  // stopped run checkpoints what it has written first.
  void stop();
  // Lets run() be called again after a stop() ended the last one (a job rotated out and back in).
  // Not while run() runs.
  void rearm() { stopping_ = false; }

  JobStats stats() const;
  const ReplicationSpec& spec() const { return spec_; }
  // The id (known once run() computed it; early_id() before).
  ReplicationId id() const;
  std::string source_display() const;
  std::string target_display() const;

 private:
  struct Run;
  ReplicationSpec spec_;
  EndpointFactory& endpoints_;
  const std::string server_uuid_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  JobStats stats_;  // guarded by mu_
  ReplicationId id_;
  std::string source_display_;
  std::string target_display_;
  Run* run_ = nullptr;  // guarded by mu_; set while run() runs
};

}  // namespace chaise::core::replication
