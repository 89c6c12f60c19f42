// http/transport/workers.cc — see workers.h.
#include "http/transport/workers.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <exception>

namespace chaise::http {

WorkerPool::WorkerPool(unsigned threads, int nice) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  guard_.emplace(ioc_.get_executor());
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) {
    threads_.emplace_back([this, nice] {
      // Linux applies a nice value to the one thread whose id is given.
      const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
      if (nice != 0 &&
          ::setpriority(PRIO_PROCESS, tid, ::getpriority(PRIO_PROCESS, tid) + nice) != 0)
        spdlog::debug("workers: could not lower a worker's priority");
      for (;;) {
        try {
          ioc_.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("workers: a task threw: {}", e.what());
        } catch (...) {
          spdlog::error("workers: a task threw a non-exception");
        }
      }
    });
  }
}

void WorkerPool::stop() {
  guard_.reset();
  ioc_.stop();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

WorkerPool::~WorkerPool() { stop(); }

}  // namespace chaise::http
