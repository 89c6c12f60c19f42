// http/transport/workers.h — a bounded pool of threads for the CPU-heavy part of requests.
//
// The io threads read requests and write responses for every connection; a request that parses a
// 60 MB body, diffs 80,000 revisions or builds a view on one of them would freeze every other
// connection it serves. Router::handle runs such requests (is_heavy_request) on this pool instead:
// the handler coroutine executes on a worker thread, socket writes still happen on the
// connection's io thread (StreamWriter hops there), and the io threads stay free for the cheap
// requests. The kernel's scheduler then runs an io thread as soon as a request arrives for it:
// measured on 2 cores, `GET /` p99 6 ms while 8 clients keep sending 80,000-id _revs_diff and
// 2,000-doc _bulk_docs requests (667 ms with the work on the io threads). Lowering the workers'
// priority (`nice`) measured no better, so it is off by default.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstddef>
#include <optional>
#include <thread>
#include <vector>

namespace chaise::http {

class WorkerPool {
 public:
  // `threads` workers (0: one per hardware thread), each at nice +`nice` relative to the process.
  // Work beyond the threads waits in the pool's queue (bounded by the connections that sent it).
  explicit WorkerPool(unsigned threads, int nice = 0);
  // Stops the threads: work not yet run is abandoned (its coroutines are destroyed with the pool).
  // Call after the HTTP server has stopped; the pool must then still exist while the store drains
  // its commits (their callbacks post here). Idempotent; the destructor calls it.
  void stop();
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  boost::asio::io_context::executor_type executor() { return ioc_.get_executor(); }
  unsigned size() const { return static_cast<unsigned>(threads_.size()); }

  // Runs the coroutine `work` on a worker thread; the caller resumes on its own executor with the
  // result (or the exception `work` threw).
  template <typename T>
  boost::asio::awaitable<T> run(boost::asio::awaitable<T> work) {
    queued_.fetch_add(1, std::memory_order_relaxed);
    co_return co_await boost::asio::co_spawn(executor(), started(queued_, std::move(work)),
                                             boost::asio::use_awaitable);
  }
  // Work handed to run() that no worker has started yet.
  std::size_t queued() const { return queued_.load(std::memory_order_relaxed); }

 private:
  template <typename T>
  static boost::asio::awaitable<T> started(std::atomic<std::size_t>& queued,
                                           boost::asio::awaitable<T> work) {
    queued.fetch_sub(1, std::memory_order_relaxed);
    co_return co_await std::move(work);
  }

  std::atomic<std::size_t> queued_{0};
  boost::asio::io_context ioc_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::vector<std::thread> threads_;
};

}  // namespace chaise::http
