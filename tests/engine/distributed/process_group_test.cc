// WorkQueue and Work: queued functions run in submission order on one thread; errors come back
// through wait(); the destructor drains the queue. ProcessGroup: raw collectives run on the
// communication thread; a failure that breaks the group makes later collectives throw the first
// error, a usage error does not.
#include "engine/distributed/process_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"

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

// run_here_or_submit: on the caller when the queue is idle; behind what is queued or running
// otherwise, in order; and what is submitted while it runs here waits for it.
TEST(WorkQueueTest, RunHereOnlyWhenIdleAndInOrder) {
  WorkQueue queue("test");
  std::thread::id ran_on;
  auto here = queue.run_here_or_submit([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_TRUE(here->is_completed());
  EXPECT_EQ(ran_on, std::this_thread::get_id());

  std::atomic<bool> release{false}, started{false};
  std::vector<int> order;
  auto blocker = queue.submit([&] {
    started = true;
    while (!release) std::this_thread::yield();
    order.push_back(0);
  });
  while (!started) std::this_thread::yield();
  auto queued = queue.run_here_or_submit([&] {
    order.push_back(1);
    ran_on = std::this_thread::get_id();
  });
  EXPECT_FALSE(queued->is_completed());  // the thread is busy: queued behind it
  release = true;
  queued->wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
  EXPECT_NE(ran_on, std::this_thread::get_id());

  // While a caller runs something here, a submission from another thread waits for it.
  std::atomic<bool> inside{false}, leave{false};
  std::shared_ptr<Work> later;
  std::thread caller([&] {
    queue.run_here_or_submit([&] {
      inside = true;
      while (!leave) std::this_thread::yield();
      order.push_back(2);
    });
  });
  while (!inside) std::this_thread::yield();
  later = queue.submit([&] { order.push_back(3); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(later->is_completed());
  leave = true;
  caller.join();
  later->wait();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));

  auto bad = queue.run_here_or_submit([] { throw std::runtime_error("lost"); });
  EXPECT_THROW(bad->wait(), std::runtime_error);
}

// One rank; each raw collective records its thread and does what `next` says.
class FakeGroup : public ProcessGroup {
 public:
  enum class Next { kRun, kLosePeer, kUsageError };
  FakeGroup() : ProcessGroup(0, 1) { start_communication(); }
  ~FakeGroup() override { stop_communication(); }
  std::string backend() const override { return "fake"; }

  Next next = Next::kRun;
  std::thread::id ran_on;
  int runs = 0;

 protected:
  void run_all_reduce(Tensor& tensor, ReduceOp) override {
    act();
    if (tensor.dtype() == DType::kFloat32) tensor.data<float>()[0] += 1.0f;
  }
  void run_broadcast(Tensor&, int) override { act(); }
  void run_all_gather(const Tensor& input, Tensor& gathered) override {
    act();
    gathered.copy_(input.view(Shape{input.numel()}));
  }
  void run_barrier() override { act(); }
  Failure describe_failure(const std::string& op, const std::exception& e) override {
    if (dynamic_cast<const Error*>(&e) != nullptr) return Failure{false, ""};
    return Failure{true, "fake " + op + ": " + e.what()};
  }

 private:
  void act() {
    ran_on = std::this_thread::get_id();
    ++runs;
    const Next n = next;
    next = Next::kRun;
    if (n == Next::kLosePeer) throw std::runtime_error("peer gone");
    if (n == Next::kUsageError) DPE_THROW("bad argument");
  }
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(ProcessGroupTest, RawCollectivesRunOnTheCommunicationThread) {
  FakeGroup group;
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2}, Shape{2});
  group.all_reduce(t);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{2, 2}));
  EXPECT_NE(group.ran_on, std::this_thread::get_id());
  std::vector<Tensor> outputs;
  Tensor x = Tensor::from_vector(std::vector<float>{3, 4, 5, 6}, Shape{2, 2});
  group.all_gather(x, outputs);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].shape(), x.shape());
  EXPECT_EQ(outputs[0].to_vector<float>(), x.to_vector<float>());
}

// bytes_submitted counts each collective's tensor in its own dtype, where it is submitted.
TEST(ProcessGroupTest, BytesSubmittedCountsEachCollectivesTensorInItsDtype) {
  FakeGroup group;
  EXPECT_EQ(group.bytes_submitted(), 0);
  Tensor f = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{4});
  group.all_reduce(f);
  EXPECT_EQ(group.bytes_submitted(), 16);
  Tensor h = f.to(DType::kBFloat16);
  group.all_reduce_async(h)->wait();
  EXPECT_EQ(group.bytes_submitted(), 16 + 8);  // 2 bytes an element
  std::vector<Tensor> outputs;
  group.all_gather(f, outputs);
  group.barrier();  // no tensor
  EXPECT_EQ(group.bytes_submitted(), 16 + 8 + 16);
}

// The failed Works outlive the group: libstdc++'s exception_ptr count is invisible to TSan, so a
// failed Work whose last owner is the communication thread reads as a race on the exception.
TEST(ProcessGroupTest, AllReduceHereRunsOnTheCallerWhenTheThreadIsIdle) {
  FakeGroup group;
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2}, Shape{2});
  auto work = group.all_reduce_here(t);
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(group.ran_on, std::this_thread::get_id());
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{2, 2}));
  group.next = FakeGroup::Next::kLosePeer;  // the group breaks as on its thread
  EXPECT_EQ(error_of([&] { group.all_reduce_here(t)->wait(); }), "fake all_reduce(sum): peer gone");
  EXPECT_NE(error_of([&] { group.all_reduce(t); }).find("the process group failed earlier"),
            std::string::npos);
}

TEST(ProcessGroupTest, AFailureBreaksTheGroupAndLaterCollectivesThrowTheFirstError) {
  std::vector<std::shared_ptr<Work>> works;
  FakeGroup group;
  Tensor t = Tensor::from_vector(std::vector<float>{1}, Shape{1});
  group.next = FakeGroup::Next::kLosePeer;
  works.push_back(group.all_reduce_async(t));
  EXPECT_EQ(error_of([&] { works.back()->wait(); }), "fake all_reduce(sum): peer gone");
  const int runs = group.runs;
  works.push_back(group.broadcast_async(t, 0));
  const std::string later = error_of([&] { works.back()->wait(); });
  EXPECT_NE(later.find("fake broadcast(root=0) (rank 0): the process group failed earlier: fake "
                       "all_reduce(sum): peer gone"),
            std::string::npos)
      << later;
  EXPECT_EQ(group.runs, runs);  // the raw broadcast never ran
}

TEST(ProcessGroupTest, AUsageErrorLeavesTheGroupUsable) {
  std::vector<std::shared_ptr<Work>> works;
  FakeGroup group;
  Tensor t = Tensor::from_vector(std::vector<float>{1}, Shape{1});
  group.next = FakeGroup::Next::kUsageError;
  works.push_back(group.broadcast_async(t, 0));
  EXPECT_EQ(error_of([&] { works.back()->wait(); }), "bad argument");
  group.all_reduce(t);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{2}));
}

TEST(ProcessGroupTest, ArgumentsAreCheckedOnTheCallersThread) {
  FakeGroup group;
  Tensor i = Tensor::from_vector(std::vector<int64_t>{1}, Shape{1});
  EXPECT_NE(error_of([&] { group.all_reduce(i, ReduceOp::kAvg); })
                .find("op avg needs a floating dtype"),
            std::string::npos);
  Tensor t = Tensor::from_vector(std::vector<float>{1}, Shape{1});
  EXPECT_NE(error_of([&] { group.broadcast(t, 1); }).find("root 1 is outside 0..0"),
            std::string::npos);
  EXPECT_EQ(group.runs, 0);
}

}  // namespace
}  // namespace distributed
}  // namespace dpe
