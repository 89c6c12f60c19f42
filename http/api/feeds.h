// http/api/feeds.h — what the streamed feeds (/{db}/_changes and /_db_updates) share: the four
// feed types' framing of rows (FeedWriter), and a live feed's wait for more between pages, with
// heartbeats, a timeout, and the client going away.
//
// Framing follows CouchDB 3:
//   normal, longpoll  {"results":[\n row,\n row \n],\n<tail>}
//   continuous        row\n row\n {<tail>}
//   eventsource       data: row\nid: <seq>\n\n ... (no tail)
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/db/changes_notifier.h"
#include "http/transport/response_stream.h"

namespace chaise::http {

enum class Feed { normal, longpoll, continuous, eventsource };

// The "seq" of a serialized row ({"seq":<seq>, ...}, or a row with "seq" last) as JSON: a quoted
// sequence or null. (Sequences are hex digits: no escapes inside the quotes.)
std::string_view row_seq_json(std::string_view row);

// Frames rows of one feed type.
class FeedWriter {
 public:
  // `separator`: between rows of a normal or longpoll feed (CouchDB's _changes writes ",\n",
  // its _db_updates ",\r\n").
  FeedWriter(ResponseStream& stream, Feed feed, std::string_view separator = ",\n")
      : stream_(stream), feed_(feed), separator_(separator) {}

  boost::asio::awaitable<bool> open();
  // Writes and clears `rows`; a live feed flushes them at once.
  boost::asio::awaitable<bool> rows(std::vector<std::string>& rows);
  // The feed is about to wait for changes. CouchDB (chttpd_db changes_callback
  // waiting_for_updates) sends an eventsource feed that has sent nothing yet a lone newline.
  // Returns whether to send that newline (newline()) first.
  bool waiting();
  boost::asio::awaitable<bool> newline();
  boost::asio::awaitable<bool> heartbeat();
  // Ends the feed with `tail_fields` (the final object's members, e.g. "last_seq":S). An
  // eventsource feed sends no tail, unless `tail_event`: then an event of that name carries it.
  boost::asio::awaitable<bool> close(const std::string& tail_fields,
                                     std::string_view tail_event = {});

 private:
  ResponseStream& stream_;
  Feed feed_;
  std::string_view separator_;
  bool first_ = true;
  bool sent_ = false;             // anything written after the head
  bool rows_since_wait_ = false;  // rows written since the last waiting()
  std::string chunk_;
};

// What a live feed waits on between reads: a wake-up from the notifier, its heartbeat/timeout
// timer, or the client going away. Shared with callbacks that may outlive one wait.
struct FeedWait {
  explicit FeedWait(const boost::asio::any_io_executor& ex) : timer(ex) {}
  // A live feed's wait ends as soon as its client goes away.
  static void watch_client(const std::shared_ptr<FeedWait>& wait, ResponseStream& stream) {
    stream.watch_peer([wait] {
      wait->closed = true;
      wait->timer.cancel();
    });
  }
  // The version of this process's commit that woke the feed (0: none known), while it is young
  // enough for the next read to use (storage::Transaction::set_read_version).
  std::int64_t fresh_version() const {
    return std::chrono::steady_clock::now() - woken_at < kVersionFresh ? woken_version : 0;
  }

  boost::asio::steady_timer timer;
  bool woken = false;
  bool closed = false;
  std::int64_t woken_version = 0;
  std::chrono::steady_clock::time_point woken_at;
  static constexpr std::chrono::seconds kVersionFresh{1};
};

enum class WaitEnd { changed, timed_out, gone };

// Asks the notifier to call `wake` once when there is more (core::ChangesNotifier::wait*).
using ArmWake =
    std::function<std::shared_ptr<core::ChangesNotifier::Waiter>(core::ChangesNotifier::Wake)>;

// A live feed with nothing (more) to send: waits until `arm`'s wake-up, sending a heartbeat
// every `heartbeat_ms` when given. `gone` when the client left or a write to it failed;
// `timed_out` after `timeout_ms` without a wake-up (never with heartbeats).
boost::asio::awaitable<WaitEnd> wait_for_more(FeedWriter& out,
                                              const std::shared_ptr<FeedWait>& wait,
                                              const ArmWake& arm,
                                              std::optional<std::int64_t> heartbeat_ms,
                                              std::int64_t timeout_ms);

}  // namespace chaise::http
