// Host-side guard of the element-wise kernels' path choice (no GPU needed): whether a launch
// runs the 16-byte kernel or the scalar one must not depend on how many rows share the launch
// or which (issue 19 item 2: a sequence's outputs in a mixed batch must equal the sequence
// alone, so every row runs the same code whatever the batch). The predicates only look at
// pointers' alignment; nothing is dereferenced.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/kernels.h"

namespace strata::cuda {
namespace {

template <class T>
T* fake(std::uintptr_t addr) {
  return reinterpret_cast<T*>(addr);
}

const std::vector<int> kRowCounts = {1, 2, 3, 7, 64, 192, 4000, 4001};

TEST(CudaKernelsChoice, RmsNormPathIndependentOfRows) {
  const int rows_list[4] = {3, 0, 2, 1};
  for (int hidden : {256, 264, 300, 4096, 8200, 40000}) {
    for (std::uintptr_t misalign : {0u, 4u}) {
      for (bool vec : {false, true}) {
        RmsNormParams p{};
        p.resid = fake<float>(0x10000 + misalign);
        p.delta = fake<const bf16>(0x20000);
        p.weight = fake<const bf16>(0x30000);
        p.out = fake<bf16>(0x40000);
        p.hidden = hidden;
        p.eps = 1e-5f;
        p.vec = vec;
        p.num_rows = 1;
        const bool first = rmsnorm_vec_applies(p);
        EXPECT_EQ(first, vec && misalign == 0 && hidden % 8 == 0 && hidden <= 32768)
            << "hidden " << hidden;
        for (int n : kRowCounts) {
          p.num_rows = n;
          p.rows = nullptr;
          EXPECT_EQ(rmsnorm_vec_applies(p), first) << "hidden " << hidden << " rows " << n;
          p.rows = rows_list;
          EXPECT_EQ(rmsnorm_vec_applies(p), first) << "hidden " << hidden << " row list, " << n;
        }
      }
    }
  }
}

TEST(CudaKernelsChoice, RopeKvPathIndependentOfRows) {
  for (int hd : {64, 128, 72}) {
    for (bool vec : {false, true}) {
      RopeKvParams p{};
      p.qkv = fake<bf16>(0x10000);
      p.kv_pool = fake<bf16>(0x20000);
      p.page_elems = 2LL * 8 * 16 * hd;
      p.heads = 32;
      p.kv_heads = 8;
      p.head_dim = hd;
      p.vec = vec;
      p.num_tokens = 1;
      const bool first = rope_kv_vec_applies(p);
      EXPECT_EQ(first, vec && hd % 16 == 0) << hd;
      for (int n : kRowCounts) {
        for (int slot_rows : {0, 1, n}) {
          p.num_tokens = n;
          p.num_slot_rows = slot_rows;
          EXPECT_EQ(rope_kv_vec_applies(p), first) << "head_dim " << hd << " tokens " << n;
        }
      }
    }
  }
}

TEST(CudaKernelsChoice, SwigluPathIndependentOfRows) {
  for (int inter : {512, 1000, 14336, 14340}) {
    for (bool vec : {false, true}) {
      SwigluParams p{};
      p.gu = fake<const bf16>(0x10000);
      p.out = fake<bf16>(0x20000);
      p.inter = inter;
      p.vec = vec;
      p.num_tokens = 1;
      const bool first = swiglu_vec_applies(p);
      EXPECT_EQ(first, vec && inter % 8 == 0) << inter;
      for (int n : kRowCounts) {
        p.num_tokens = n;
        EXPECT_EQ(swiglu_vec_applies(p), first) << "inter " << inter << " tokens " << n;
      }
    }
  }
}

}  // namespace
}  // namespace strata::cuda
