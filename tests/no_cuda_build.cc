// Stands in for a CUDA test in a build without CUDA (--config=nocuda): it says why it skips.
#include <gtest/gtest.h>

TEST(CudaBuild, Skipped) { GTEST_SKIP() << "dpe was built without CUDA (--config=nocuda)"; }
