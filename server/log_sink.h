// server/log_sink.h — the log's way to stderr when stderr is a pipe or a file (journald, a
// supervisor, a benchmark's log file).
//
// spdlog's stderr sink writes and flushes every line under its mutex: with the access log on, one
// write(2) per request, and the io threads queue on that mutex (strace of a GET load: one write
// and most of the futex calls per request). This sink gathers lines in a buffer and writes it
// when it passes kFlushBytes, at once for a warning or worse, and on flush() (spdlog::flush_every
// calls it every second). A line of info waits at most that second; after kill -9 at most that
// second of info lines is lost, never a warning.
#pragma once

#include <spdlog/details/file_helper.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

#include <mutex>
#include <string>

namespace chaise::server {

class BufferedFdSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  static constexpr std::size_t kFlushBytes = 32 * 1024;
  explicit BufferedFdSink(int fd) : fd_(fd) { buffer_.reserve(kFlushBytes + 1024); }
  ~BufferedFdSink() override;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;

 private:
  const int fd_;
  std::string buffer_;
};

// [log] writer = file: lines appended to a file that reopen() opens again by its name (SIGHUP,
// after logrotate moved it). The logger stays the same: replacing spdlog's default logger while
// other threads log through its raw pointer freed it under them (TSan,
// ConfiguredServerTest.LogFileIsReopenedOnSighup). Lines logged during a reopen wait on the
// sink's mutex.
class ReopenableFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ReopenableFileSink(const std::string& path);
  void reopen();

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;

 private:
  spdlog::details::file_helper file_;
};

}  // namespace chaise::server
