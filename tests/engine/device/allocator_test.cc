#include "engine/device/allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <type_traits>
#include <vector>

#include "engine/core/error.h"

namespace dpe {
namespace {

// The accounting is the base class's; a device type only supplies the memory.
class MallocAllocator final : public Allocator {
 public:
  using Allocator::Allocator;

 protected:
  void* raw_allocate(size_t bytes) override { return std::malloc(bytes == 0 ? 1 : bytes); }
  void raw_deallocate(void* ptr, size_t) override { std::free(ptr); }
};

TEST(AllocatorTest, CountsCurrentPeakAndAllocations) {
  MallocAllocator a(Device::parse("host:0"), 0);
  void* p = a.allocate(1000);
  void* q = a.allocate(500);
  EXPECT_EQ(a.stats().current_bytes, 1500);
  a.deallocate(p, 1000);
  EXPECT_EQ(a.stats().current_bytes, 500);
  EXPECT_EQ(a.stats().peak_bytes, 1500);
  EXPECT_EQ(a.stats().allocations, 2);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, 500);
  a.deallocate(q, 500);
  EXPECT_EQ(a.stats().current_bytes, 0);
  EXPECT_EQ(a.stats().peak_bytes, 500);
}

TEST(AllocatorTest, CapacityErrorNamesDeviceRequestAndFree) {
  MallocAllocator a(Device::parse("host:1"), 1000);
  void* p = a.allocate(600);
  try {
    a.allocate(500);
    FAIL() << "allocation past capacity succeeded";
  } catch (const OutOfMemoryError& e) {  // a dpe::Error of its own kind, as torch's
    static_assert(std::is_base_of_v<Error, OutOfMemoryError>);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("host:1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("500 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("400 bytes free"), std::string::npos) << msg;
  }
  // The failed request left the accounting untouched.
  EXPECT_EQ(a.stats().current_bytes, 600);
  EXPECT_EQ(a.stats().peak_bytes, 600);
  a.deallocate(p, 600);
  void* r = a.allocate(1000);  // exactly the capacity fits
  a.deallocate(r, 1000);
}

size_t idx(MemoryCategory c) { return static_cast<size_t>(c); }

TEST(AllocatorTest, BreaksThePeakDownByCategory) {
  MallocAllocator a(Device::parse("host:0"), 0);
  void* params = a.allocate(1000, MemoryCategory::kParameters);
  void* acts = a.allocate(300, MemoryCategory::kActivations);
  a.deallocate(acts, 300, MemoryCategory::kActivations);
  void* outs = a.allocate(200, MemoryCategory::kOutputs);  // 1200: below the peak of 1300
  MemoryStats s = a.stats();
  EXPECT_EQ(s.peak_bytes, 1300);
  EXPECT_EQ(s.at_peak_by_category[idx(MemoryCategory::kParameters)], 1000);
  EXPECT_EQ(s.at_peak_by_category[idx(MemoryCategory::kActivations)], 300);
  EXPECT_EQ(s.at_peak_by_category[idx(MemoryCategory::kOutputs)], 0);  // came after the peak
  EXPECT_EQ(s.peak_by_category[idx(MemoryCategory::kOutputs)], 200);
  EXPECT_EQ(s.current_by_category[idx(MemoryCategory::kActivations)], 0);
  // A retag moves the count, not the total.
  a.retag(200, MemoryCategory::kOutputs, MemoryCategory::kGradients);
  s = a.stats();
  EXPECT_EQ(s.current_bytes, 1200);
  EXPECT_EQ(s.current_by_category[idx(MemoryCategory::kOutputs)], 0);
  EXPECT_EQ(s.current_by_category[idx(MemoryCategory::kGradients)], 200);
  a.deallocate(outs, 200, MemoryCategory::kGradients);
  a.reset_peak();
  s = a.stats();
  EXPECT_EQ(s.peak_bytes, 1000);
  EXPECT_EQ(s.at_peak_by_category[idx(MemoryCategory::kActivations)], 0);
  EXPECT_EQ(s.peak_by_category[idx(MemoryCategory::kGradients)], 0);
  a.deallocate(params, 1000, MemoryCategory::kParameters);
}

// Parameters, gradients and optimizer state held together, not each one's own peak: gradients
// freed before the optimizer state grows do not count with it.
TEST(AllocatorTest, TracksThePeakOfModelStatesHeldTogether) {
  MallocAllocator a(Device::parse("host:0"), 0);
  void* params = a.allocate(1000, MemoryCategory::kParameters);
  void* grads = a.allocate(400, MemoryCategory::kGradients);
  void* acts = a.allocate(5000, MemoryCategory::kActivations);  // not a model state
  EXPECT_EQ(a.stats().peak_model_state_bytes, 1400);
  a.deallocate(grads, 400, MemoryCategory::kGradients);
  void* state = a.allocate(300, MemoryCategory::kOptimizerState);  // 1300 together: below 1400
  EXPECT_EQ(a.stats().peak_model_state_bytes, 1400);
  a.retag(5000, MemoryCategory::kActivations, MemoryCategory::kGradients);  // now 6300
  EXPECT_EQ(a.stats().peak_model_state_bytes, 6300);
  a.deallocate(acts, 5000, MemoryCategory::kGradients);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_model_state_bytes, 1300);
  EXPECT_EQ(model_states(a.stats().current_by_category), 1300);
  a.deallocate(state, 300, MemoryCategory::kOptimizerState);
  a.deallocate(params, 1000, MemoryCategory::kParameters);
}

TEST(AllocatorTest, DefaultCategoryIsTheThreadsScope) {
  MallocAllocator a(Device::parse("host:0"), 0);
  EXPECT_EQ(current_memory_category(), MemoryCategory::kOther);
  void* p;
  {
    MemoryCategoryScope scope(MemoryCategory::kOptimizerState);
    p = a.allocate(64);
    std::thread([&] {  // another thread keeps its own category
      EXPECT_EQ(current_memory_category(), MemoryCategory::kOther);
    }).join();
  }
  EXPECT_EQ(current_memory_category(), MemoryCategory::kOther);
  EXPECT_EQ(a.stats().current_by_category[idx(MemoryCategory::kOptimizerState)], 64);
  a.deallocate(p, 64, MemoryCategory::kOptimizerState);
  EXPECT_STREQ(memory_category_name(MemoryCategory::kOutputs), "gathered outputs");
}

TEST(AllocatorTest, CountersAreExactUnderConcurrentAllocation) {
  MallocAllocator a(Device::parse("host:0"), 0);
  constexpr int kThreads = 8, kIters = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&a, t] {
      std::vector<void*> held;
      for (int i = 0; i < kIters; ++i) {
        held.push_back(a.allocate(16 + t));
        if (held.size() > 4) {
          a.deallocate(held.front(), 16 + t);
          held.erase(held.begin());
        }
      }
      for (void* p : held) a.deallocate(p, 16 + t);
    });
  }
  for (auto& th : threads) th.join();
  const MemoryStats s = a.stats();
  EXPECT_EQ(s.current_bytes, 0);
  EXPECT_EQ(s.allocations, kThreads * kIters);
  EXPECT_GT(s.peak_bytes, 0);
  // At most 5 blocks per thread are ever live at once.
  int64_t bound = 0;
  for (int t = 0; t < kThreads; ++t) bound += 5 * (16 + t);
  EXPECT_LE(s.peak_bytes, bound);
}

}  // namespace
}  // namespace dpe
