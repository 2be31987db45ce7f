// StreamsTest: the executor's wait between ops (runtime/cpu/streams.h) is
// bounded: a counter stored without a futex wake-up (a wake-up lost) is seen
// by its waiter within one bound, never a hang.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <thread>

#include "runtime/cpu/streams.h"

namespace {

using namespace std::chrono_literals;

TEST(Streams, AStoreWithoutAWakeUpIsSeenWithinHalfASecond) {
  std::atomic<int64_t> flag{0};
  std::atomic<bool> returned{false};
  int64_t seen = 0;
  std::thread waiter([&] {
    seen = streams_wait_until(flag, 1);
    returned = true;
  });
  // Long past the spin and the yields: the waiter sleeps in the futex.
  std::this_thread::sleep_for(120ms);
  ASSERT_FALSE(returned.load()) << "returned before the counter reached its target";
  const auto stored = std::chrono::steady_clock::now();
  flag.store(1, std::memory_order_release);  // no wake-up
  while (!returned.load() && std::chrono::steady_clock::now() - stored < 500ms)
    std::this_thread::sleep_for(1ms);
  const auto waited = std::chrono::steady_clock::now() - stored;
  const bool bounded = returned.load();
  if (!bounded)  // release it, so that the test ends
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&flag), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
            nullptr, 0);
  waiter.join();
  EXPECT_TRUE(bounded) << "the waiter did not see a store without a wake-up within 0.5 s";
  EXPECT_EQ(seen, 1);
  std::printf("seen %.1f ms after the store\n",
              std::chrono::duration<double, std::milli>(waited).count());
}

}  // namespace
