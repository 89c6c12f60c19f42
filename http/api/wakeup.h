// http/api/wakeup.h — a coroutine that waits for another thread without holding its own.
//
// The state `w` shared with the other thread has a mutex `mu`, a `ready()` test and a
// `std::function<void()> resume` slot, both guarded by `mu`. co_await async_wait_ready(w, token)
// resumes the coroutine on its own executor at once if ready() holds, else stores `resume`; the
// other thread makes ready() hold and then calls (and clears) the stored `resume`, outside `mu`.
#pragma once

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <functional>
#include <memory>
#include <mutex>

namespace chaise::http {

template <typename W, typename Token>
auto async_wait_ready(std::shared_ptr<W> w, Token&& token) {
  return boost::asio::async_initiate<Token, void()>(
      [w](auto handler) {
        auto executor = boost::asio::get_associated_executor(handler);
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        std::function<void()> resume = [shared, executor] {
          boost::asio::post(executor, [shared]() mutable { (*shared)(); });
        };
        std::unique_lock lock(w->mu);
        if (w->ready()) {
          lock.unlock();
          resume();
        } else {
          w->resume = std::move(resume);
        }
      },
      token);
}

}  // namespace chaise::http
