// ImbalanceReport: medians over steps per device, device 0 against the mean of the others, the
// memory warning's threshold, and the same figures in the table and the JSON.
#include "engine/parallel/imbalance_report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"

namespace dpe {
namespace {

// One step on three devices; device 0 holds `peak0` bytes at its peak, the others 1000.
StepStats step(int64_t wall_ns, int64_t peak0, int64_t forward_ns) {
  StepStats s;
  s.wall_ns = wall_ns;
  for (int d = 0; d < 3; ++d) {
    DeviceStepStats x;
    x.device = Device(DeviceType::kHost, d);
    x.peak_bytes = d == 0 ? peak0 : 1000;
    x.held_bytes = 100;
    x.busy_ns[static_cast<int>(Phase::kForward)] = forward_ns;
    x.busy_total_ns = forward_ns * (d == 0 ? 2 : 1);
    x.idle_ns = wall_ns - x.busy_total_ns;
    s.devices.push_back(x);
  }
  return s;
}

TEST(ImbalanceReportTest, MediansAndDeviceZeroAgainstTheOthers) {
  // Medians: wall 4 ms, device 0's peak 2000 bytes, forward 1 ms (the outlier step is ignored).
  const ImbalanceReport r = ImbalanceReport::from_steps(
      {step(4'000'000, 2000, 1'000'000), step(90'000'000, 9000, 50'000'000),
       step(4'000'000, 2000, 1'000'000)});
  EXPECT_EQ(r.steps, 3);
  EXPECT_DOUBLE_EQ(r.step_ms, 4.0);
  ASSERT_EQ(r.devices.size(), 3u);
  EXPECT_DOUBLE_EQ(r.devices[0].peak_bytes, 2000);
  EXPECT_DOUBLE_EQ(r.devices[1].busy_ms[static_cast<int>(Phase::kForward)], 1.0);
  EXPECT_DOUBLE_EQ(r.extra_peak_bytes, 1000);
  EXPECT_DOUBLE_EQ(r.extra_peak_ratio, 2.0);
  EXPECT_DOUBLE_EQ(r.extra_busy_ms, 1.0);
  EXPECT_DOUBLE_EQ(r.others_wait_share, 0.75);  // idle 3 ms of a 4 ms step
  EXPECT_TRUE(r.memory_warning);
  EXPECT_NE(r.warning().find("100% above"), std::string::npos) << r.warning();
  EXPECT_NE(r.table().find("device 0 vs mean of the others"), std::string::npos);
  const auto j = nlohmann::json::parse(r.to_json());
  EXPECT_DOUBLE_EQ(j["device0_peak_ratio"].get<double>(), 2.0);
  EXPECT_EQ(j["devices"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["devices"][1]["busy_ms"]["forward"].get<double>(), 1.0);
}

TEST(ImbalanceReportTest, NoWarningBelowTheThresholdAndNoComparisonForOneDevice) {
  EXPECT_FALSE(ImbalanceReport::from_steps({step(1'000'000, 1200, 0)}).memory_warning);
  EXPECT_TRUE(ImbalanceReport::from_steps({step(1'000'000, 1300, 0)}).memory_warning);
  StepStats one = step(1'000'000, 5000, 0);
  one.devices.resize(1);
  const ImbalanceReport r = ImbalanceReport::from_steps({one});
  EXPECT_EQ(r.extra_peak_bytes, 0);
  EXPECT_FALSE(r.memory_warning);
  EXPECT_EQ(r.warning(), "");
  EXPECT_EQ(r.table().find("device 0 vs"), std::string::npos);
  EXPECT_THROW(ImbalanceReport::from_steps({}), Error);
}

TEST(ImbalanceReportTest, BreaksDeviceZerosExtraDownByCategoryFromTheMedianStep) {
  auto at = [](MemoryCategory c) { return static_cast<size_t>(c); };
  auto with_breakdown = [&](int64_t outputs0) {
    StepStats s = step(4'000'000, 1000 + outputs0, 1'000'000);
    for (size_t d = 0; d < 3; ++d) {
      s.devices[d].peak_by_category[at(MemoryCategory::kActivations)] = 1000;
      if (d == 0) s.devices[d].peak_by_category[at(MemoryCategory::kOutputs)] = outputs0;
    }
    return s;
  };
  // Device 0's median peak is the 3000-byte step, whose breakdown is taken whole.
  const ImbalanceReport r =
      ImbalanceReport::from_steps({with_breakdown(2000), with_breakdown(9000), with_breakdown(500)});
  EXPECT_DOUBLE_EQ(r.devices[0].peak_bytes, 3000);
  EXPECT_DOUBLE_EQ(r.devices[0].peak_by_category[at(MemoryCategory::kOutputs)], 2000);
  EXPECT_DOUBLE_EQ(r.extra_peak_by_category[at(MemoryCategory::kOutputs)], 2000);
  EXPECT_DOUBLE_EQ(r.extra_peak_by_category[at(MemoryCategory::kActivations)], 0);
  double explained = 0;
  for (double b : r.extra_peak_by_category) explained += b;
  EXPECT_DOUBLE_EQ(explained, r.extra_peak_bytes);
  const std::string table = r.memory_breakdown();
  EXPECT_NE(table.find("gathered outputs"), std::string::npos) << table;
  EXPECT_NE(table.find("+1.95 KiB"), std::string::npos) << table;
  EXPECT_EQ(table.find("optimizer state"), std::string::npos) << table;  // nothing held: no row
  const auto j = nlohmann::json::parse(r.to_json());
  EXPECT_DOUBLE_EQ(j["device0_extra_peak_by_category"]["gathered outputs"].get<double>(), 2000);
}

}  // namespace
}  // namespace dpe
