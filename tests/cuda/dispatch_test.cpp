// Host-side checks of the CUDA code (no GPU needed): the head_dim dispatch fails loudly with
// the value and what is supported; random model specs parse or fail with a ConfigError.
#include "cuda/dispatch.h"

#include <gtest/gtest.h>

#include "cuda/cuda_backend.h"
#include "runtime/error.h"

namespace strata::cuda {
namespace {

int dispatched(int hd) {
  int got = -1;
  STRATA_DISPATCH_HEAD_DIM(hd, "test", HD, { got = HD; });
  return got;
}

TEST(CudaDispatch, HeadDimSupportedValues) {
  EXPECT_EQ(dispatched(64), 64);
  EXPECT_EQ(dispatched(128), 128);
}

TEST(CudaDispatch, UnsupportedHeadDimNamesValueAndSupported) {
  try {
    dispatched(96);
    FAIL() << "head_dim 96 accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("96"), std::string::npos) << m;
    EXPECT_NE(m.find("64, 128"), std::string::npos) << m;
    EXPECT_EQ(e.key(), "head_dim");
  }
  EXPECT_THROW(check_elem_bytes(4, "test"), ConfigError);
}

}  // namespace
}  // namespace strata::cuda
