#include "server/log_sink.h"

#include <unistd.h>

#include <cerrno>

namespace chaise::server {

BufferedFdSink::~BufferedFdSink() {
  std::lock_guard lock(mutex_);
  flush_();
}

void BufferedFdSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t formatted;
  formatter_->format(msg, formatted);
  buffer_.append(formatted.data(), formatted.size());
  if (msg.level >= spdlog::level::warn || buffer_.size() >= kFlushBytes) flush_();
}

void BufferedFdSink::flush_() {
  std::size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // nowhere to write the log: drop it rather than grow without bound
    done += static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

ReopenableFileSink::ReopenableFileSink(const std::string& path) { file_.open(path); }

void ReopenableFileSink::reopen() {
  std::lock_guard lock(mutex_);
  file_.flush();
  file_.reopen(/*truncate=*/false);
}

void ReopenableFileSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t formatted;
  formatter_->format(msg, formatted);
  file_.write(formatted);
}

void ReopenableFileSink::flush_() { file_.flush(); }

}  // namespace chaise::server
