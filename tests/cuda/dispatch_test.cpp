// Host-side checks of the CUDA code (no GPU needed): the head_dim dispatch fails loudly with
// the value and what is supported; random model specs parse or fail with a ConfigError; what an
// fp8 KV cache does not support yet is refused before any device work.
#include "cuda/dispatch.h"

#include <gtest/gtest.h>

#include <cstdlib>

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

// cache.kv_dtype fp8 runs every layer kind at tp_size 1 (full-cache and sparse layers, server
// and per-request profiles); tensor parallelism is refused by the CUDA backend before it touches
// a device, with the key and what is missing (never run with the ranks' scales unwired).
TEST(CudaDispatch, Fp8KvCacheRefusesTensorParallelismBeforeAnyDeviceWork) {
  EXPECT_NO_THROW(check_kv_dtype(KvDtype::kBf16, 2));  // bf16: nothing to refuse
  EXPECT_NO_THROW(check_kv_dtype(KvDtype::kFp8, 1));   // one GPU, whatever the profile
  EXPECT_THROW(check_kv_dtype(KvDtype::kFp8, 2), ConfigError);
  Config c;
  c.model.path = "random:tiny";
  c.cache.kv_dtype = KvDtype::kFp8;
  c.sparsity.enabled = true;
  c.backend.tp_size = 2;
  try {
    make_cuda_backends(c);
    ADD_FAILURE() << "fp8 KV accepted with tensor parallelism";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "cache.kv_dtype");
    const std::string m = e.what();
    EXPECT_NE(m.find("tensor parallelism"), std::string::npos) << m;
    EXPECT_NE(m.find("backend.kind: cpu"), std::string::npos) << m;
  }
  // (Sparse layers and per-request profiles with fp8 KV at tp_size 1 are accepted by the check;
  // they run in tests/gpu/kv_fp8_test.cpp GpuKvFp8.Sparse* and a random model without given
  // scales is calibrated on the device, cuda/backend/kv_calibration.cpp.)
}

}  // namespace
}  // namespace strata::cuda
