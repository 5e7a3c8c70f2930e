// The tools' one rule (docs/flags.md, "Exit codes"): usage 2, data 3, anything else 1, out of memory
// included, whichever way it comes (dpe's OutOfMemoryError, std::bad_alloc).
#include "tools/common/exit_codes.h"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "engine/core/error.h"

namespace dpe::tools {
namespace {

TEST(ExitCodesTest, OutOfMemoryIsAFailedRunNeverData) {
  EXPECT_EQ(exit_code_for(UsageError("u")), kExitUsage);
  EXPECT_EQ(exit_code_for(DataError("d")), kExitData);
  EXPECT_EQ(exit_code_for(Error("e")), kExitFailure);
  EXPECT_EQ(exit_code_for(std::runtime_error("r")), kExitFailure);
  EXPECT_EQ(exit_code_for(OutOfMemoryError("out of memory on host:0")), kExitFailure);
  EXPECT_EQ(exit_code_for(std::bad_alloc()), kExitFailure);
  EXPECT_TRUE(out_of_memory(OutOfMemoryError("o")));
  EXPECT_TRUE(out_of_memory(std::bad_alloc()));
  EXPECT_FALSE(out_of_memory(DataError("d")));
  EXPECT_FALSE(out_of_memory(Error("e")));
}

}  // namespace
}  // namespace dpe::tools
