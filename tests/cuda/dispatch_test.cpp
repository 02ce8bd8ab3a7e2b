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

// cache.kv_dtype fp8 runs full-cache layers at tp_size 1; what the fp8 pool does not support yet
// (sparse layers: the cuda/sparse/ kernels read bf16 pages; tensor parallelism) is refused by
// the CUDA backend before it touches a device, with the key and what is missing (never run with
// codes read as bf16).
TEST(CudaDispatch, Fp8KvCacheRefusesWhatIsMissingBeforeAnyDeviceWork) {
  unsetenv("STRATA_KV_FP8_SPARSE");  // the default: sparse layers on e4m3 pages refused
  EXPECT_NO_THROW(check_kv_dtype(KvDtype::kBf16, true, true, 2));   // bf16: nothing to refuse
  EXPECT_NO_THROW(check_kv_dtype(KvDtype::kFp8, false, false, 1));  // the full cache, one GPU
  auto refused = [](const Config& c, const char* names) {
    try {
      make_cuda_backends(c);
      ADD_FAILURE() << "fp8 KV accepted with " << names;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), "cache.kv_dtype");
      const std::string m = e.what();
      EXPECT_NE(m.find(names), std::string::npos) << m;
      EXPECT_NE(m.find("backend.kind: cpu"), std::string::npos) << m;
    }
  };
  Config c;
  c.model.path = "random:tiny";
  c.cache.kv_dtype = KvDtype::kFp8;
  // The default lets a request's kv_sparsity make layers sparse on a full-cache server.
  ASSERT_NE(c.sparsity_request_override, RequestOverride::kOff);
  refused(c, "sparsity.request_override: off");
  c.sparsity_request_override = RequestOverride::kOff;
  c.sparsity.enabled = true;
  refused(c, "sparse layers");
  c.sparsity.enabled = false;
  c.backend.tp_size = 2;
  refused(c, "tensor parallelism");
  c.sparsity.enabled = true;
  refused(c, "cuda/sparse/");
  // (A random model without given scales is accepted: it is calibrated on the device,
  // cuda/backend/kv_calibration.cpp, tested in tests/gpu/kv_fp8_test.cpp.)
  // What the backend reports for a profile published later (BackendInfo::sparse_refusal): the
  // engine refuses sparse profiles with it on fp8, accepts them on bf16.
  EXPECT_TRUE(kv_sparse_refusal(KvDtype::kBf16).empty());
  EXPECT_NE(kv_sparse_refusal(KvDtype::kFp8).find("cuda/sparse/"), std::string::npos);
  // The refusal says the kernels exist but are unvalidated and names the variable that enables
  // them; STRATA_KV_FP8_SPARSE=1 runs sparse layers on e4m3 pages (per-request profiles and
  // tensor parallelism stay refused).
  EXPECT_NE(kv_sparse_refusal(KvDtype::kFp8).find("STRATA_KV_FP8_SPARSE=1"), std::string::npos);
  EXPECT_NE(kv_sparse_refusal(KvDtype::kFp8).find("not validated on a GPU"), std::string::npos);
  EXPECT_THROW(check_kv_dtype(KvDtype::kFp8, true, false, 1), ConfigError);
  setenv("STRATA_KV_FP8_SPARSE", "1", 1);
  EXPECT_TRUE(kv_sparse_refusal(KvDtype::kFp8).empty());
  EXPECT_NO_THROW(check_kv_dtype(KvDtype::kFp8, true, false, 1));
  EXPECT_THROW(check_kv_dtype(KvDtype::kFp8, true, true, 1), ConfigError);   // per request
  EXPECT_THROW(check_kv_dtype(KvDtype::kFp8, true, false, 2), ConfigError);  // tp
  c.sparsity.enabled = true;
  c.backend.tp_size = 1;
  c.sparsity_request_override = RequestOverride::kAny;
  refused(c, "sparsity.request_override: off");
  setenv("STRATA_KV_FP8_SPARSE", "0", 1);  // only "1" enables
  EXPECT_FALSE(kv_sparse_refusal(KvDtype::kFp8).empty());
  unsetenv("STRATA_KV_FP8_SPARSE");
  EXPECT_FALSE(kv_sparse_refusal(KvDtype::kFp8).empty());
}

}  // namespace
}  // namespace strata::cuda
