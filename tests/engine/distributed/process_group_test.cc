// WorkQueue and Work: queued functions run in submission order on one thread; errors come back
// through wait(); the destructor drains the queue.
#include "engine/distributed/process_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace dpe {
namespace distributed {
namespace {

TEST(WorkQueueTest, RunsInSubmissionOrderOnOneThread) {
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::vector<std::shared_ptr<Work>> works;
  {
    WorkQueue queue("test");
    for (int i = 0; i < 50; ++i) {
      works.push_back(queue.submit([&, i] {
        order.push_back(i);
        threads.push_back(std::this_thread::get_id());
      }));
    }
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  }
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  for (const auto& id : threads) EXPECT_EQ(id, threads[0]);
  EXPECT_NE(threads[0], std::this_thread::get_id());
  for (auto& w : works) EXPECT_TRUE(w->is_completed());
}

TEST(WorkQueueTest, WaitRethrowsTheErrorAndLaterWorkStillRuns) {
  WorkQueue queue("test");
  auto bad = queue.submit([] { throw std::runtime_error("collective broke"); });
  std::atomic<bool> ran{false};
  auto good = queue.submit([&] { ran = true; });
  EXPECT_THROW(
      {
        try {
          bad->wait();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "collective broke");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_THROW(bad->wait(), std::runtime_error);  // again: the same error
  good->wait();
  EXPECT_TRUE(ran);
}

TEST(WorkQueueTest, DestructorFinishesQueuedWork) {
  std::atomic<int> count{0};
  std::vector<std::shared_ptr<Work>> works;
  {
    WorkQueue queue("test");
    for (int i = 0; i < 20; ++i) works.push_back(queue.submit([&] { ++count; }));
  }
  EXPECT_EQ(count.load(), 20);
  for (auto& w : works) EXPECT_TRUE(w->is_completed());
}

}  // namespace
}  // namespace distributed
}  // namespace dpe
