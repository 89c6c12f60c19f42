#include "http/api/feeds.h"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

namespace chaise::http {

std::string_view row_seq_json(std::string_view row) {
  // A change row starts with its seq; a _db_updates row ends with it.
  constexpr std::string_view kFirst = "{\"seq\":";
  constexpr std::string_view kLast = ",\"seq\":";
  if (row.starts_with(kFirst)) {
    row.remove_prefix(kFirst.size());
  } else if (const auto at = row.rfind(kLast); at != std::string_view::npos) {
    row.remove_prefix(at + kLast.size());
  } else {
    return "null";
  }
  if (!row.starts_with('"')) return "null";
  return row.substr(0, row.find('"', 1) + 1);
}

boost::asio::awaitable<bool> FeedWriter::open() {
  if (feed_ == Feed::normal || feed_ == Feed::longpoll)
    co_return co_await stream_.write("{\"results\":[\n");
  co_return true;
}

boost::asio::awaitable<bool> FeedWriter::rows(std::vector<std::string>& rows) {
  chunk_.clear();
  for (std::string& row : rows) {
    switch (feed_) {
      case Feed::normal:
      case Feed::longpoll:
        if (!first_) chunk_ += separator_;
        chunk_ += row;
        break;
      case Feed::continuous:
        chunk_ += row;
        chunk_ += "\n";
        break;
      case Feed::eventsource:
        // The id is the seq as JSON, as CouchDB writes it: "id: \"<seq>\"" or "id: null".
        chunk_ += "data: ";
        chunk_ += row;
        chunk_ += "\nid: ";
        chunk_ += row_seq_json(row);
        chunk_ += "\n\n";
        break;
    }
    first_ = false;
  }
  rows.clear();
  if (chunk_.empty()) co_return true;
  sent_ = true;
  rows_since_wait_ = true;
  if (!co_await stream_.write(chunk_)) co_return false;
  // Live feeds deliver each batch as soon as it exists.
  if (feed_ != Feed::normal) co_return co_await stream_.flush();
  co_return true;
}

bool FeedWriter::waiting() {
  rows_since_wait_ = false;
  if (feed_ != Feed::eventsource || sent_) return false;
  sent_ = true;
  return true;
}

boost::asio::awaitable<bool> FeedWriter::newline() {
  // (A named view, not a literal in the co_await expression: GCC 12 miscompiles that.)
  const std::string_view text = "\n";
  if (!co_await stream_.write(text)) co_return false;
  co_return co_await stream_.flush();
}

boost::asio::awaitable<bool> FeedWriter::heartbeat() {
  // (Kept out of the co_await expression: GCC 12 miscompiles a conditional there.)
  std::string_view beat = "\n";
  if (feed_ == Feed::eventsource) beat = "event: heartbeat\ndata: \n\n";
  sent_ = true;
  if (!co_await stream_.write(beat)) co_return false;
  co_return co_await stream_.flush();
}

boost::asio::awaitable<bool> FeedWriter::close(const std::string& tail_fields,
                                               std::string_view tail_event) {
  const std::string tail = tail_fields + "}\n";
  switch (feed_) {
    case Feed::normal:
    case Feed::longpoll:
      if (!co_await stream_.write("\n],\n" + tail)) co_return false;
      break;
    case Feed::continuous:
      if (!co_await stream_.write("{" + tail)) co_return false;
      break;
    case Feed::eventsource:
      // CouchDB sends no last_seq event: the stream just ends, with a newline when rows came
      // since the feed last waited (a feed that timed out ends right after what it sent).
      if (!tail_event.empty() &&
          !co_await stream_.write("event: " + std::string(tail_event) + "\ndata: {" + tail + "\n"))
        co_return false;
      if (tail_event.empty() && rows_since_wait_) {
        const std::string_view text = "\n";  // (named: see newline())
        if (!co_await stream_.write(text)) co_return false;
      }
      break;
  }
  co_return co_await stream_.finish();
}

boost::asio::awaitable<WaitEnd> wait_for_more(FeedWriter& out,
                                              const std::shared_ptr<FeedWait>& wait,
                                              const ArmWake& arm,
                                              std::optional<std::int64_t> heartbeat_ms,
                                              std::int64_t timeout_ms) {
  auto executor = co_await boost::asio::this_coro::executor;
  bool newline_sent = true;
  if (out.waiting()) newline_sent = co_await out.newline();
  if (!newline_sent) co_return WaitEnd::gone;
  wait->woken = false;
  auto waiter = arm([wait, executor](std::int64_t version) {
    const auto at = std::chrono::steady_clock::now();
    boost::asio::post(executor, [wait, version, at] {
      wait->woken = true;
      wait->woken_version = version;
      wait->woken_at = at;
      wait->timer.cancel();
    });
  });
  const auto started = std::chrono::steady_clock::now();
  for (;;) {
    const auto interval = std::chrono::milliseconds(heartbeat_ms.value_or(timeout_ms));
    wait->timer.expires_after(interval);
    if (!wait->woken && !wait->closed) {
      boost::system::error_code ec;
      co_await wait->timer.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    }
    if (wait->closed) co_return WaitEnd::gone;  // the client left: free the feed now
    if (wait->woken) co_return WaitEnd::changed;
    if (heartbeat_ms) {
      if (!co_await out.heartbeat()) co_return WaitEnd::gone;
      continue;
    }
    if (std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(timeout_ms))
      co_return WaitEnd::timed_out;
  }
}

}  // namespace chaise::http
