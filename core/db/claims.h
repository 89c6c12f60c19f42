// core/db/claims.h — claims on work that one server at a time should do (building an index), kept
// in the store so that every server sharing it (on FoundationDB) sees them.
//
// A claim is one key whose value is (Owner, WrittenMs). Its holder writes it again as it works and
// clears it when done; a claim that stops changing has lapsed (its server died or stalled). Two
// clocks can judge that:
//  - claim_live(): the writer's wall clock against the reader's, for a one-off answer ("is a
//    build running?"); it assumes the servers' clocks roughly agree;
//  - ClaimWatch: how long the reader itself has seen the same value, by its own steady clock, for a
//    server deciding to take the work over; it assumes nothing of the other server's clock.
// A claim saves work, it does not make work correct: a stalled holder may wake after its claim was
// taken over, so what it guards must stay exact under two workers at once (conflicting reads).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/db/databases.h"

namespace chaise::core {

struct Claim {
  std::string owner;
  std::int64_t written_ms = 0;  // the holder's wall clock
  std::string raw;              // the value as stored: a rewrite always changes it
};

// This process's name in the store (random, made once): the replicator's leases and the claims of
// its work carry it.
const std::string& node_id();
// A name for one piece of this process's work: node_id() and a counter, so that two requests of
// one process claim apart.
std::string work_owner();

// The claim at `key`, nullopt when there is none.
StorageResult<std::optional<Claim>> read_claim(Transaction& tr, std::string_view key,
                                               storage::Snapshot snapshot);
void write_claim(Transaction& tr, std::string_view key, std::string_view owner,
                 std::int64_t now_ms);
// Clears the claim when `owner` holds it (another's, taken after this one lapsed, stays).
storage::Status drop_claim(Transaction& tr, std::string_view key, std::string_view owner);
// Whether `claim` was written less than `lapse_ms` before `now_ms` (wall clocks).
bool claim_live(const std::optional<Claim>& claim, std::int64_t now_ms, std::int64_t lapse_ms);

// Judges another server's claim by this server's clock: lapsed once the same value has been seen
// for `lapse`.
class ClaimWatch {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ClaimWatch(Clock::duration lapse) : lapse_(lapse) {}
  bool lapsed(const Claim& seen, Clock::time_point now);

 private:
  Clock::duration lapse_;
  std::string last_;
  Clock::time_point since_{};
};

}  // namespace chaise::core
