#include "runtime/cpu/kv_pool.h"

#include <string>

#include "runtime/error.h"

namespace strata::cpu {

KvPool::KvPool(KvLayout layout, int num_pages) : layout_(layout), num_pages_(num_pages) {
  STRATA_CHECK(layout.elem_bytes == 4 || layout.elem_bytes == 1,
               "the CPU pool stores fp32 or e4m3 (elem_bytes 4 or 1), got " +
                   std::to_string(layout.elem_bytes));
  STRATA_CHECK(num_pages >= 0 && layout.kv_heads > 0 && layout.head_dim > 0, "bad pool shape");
  kv_ = std::make_unique_for_overwrite<std::byte[]>(static_cast<std::size_t>(num_pages) *
                                                    layout.page_bytes());
  scores_ = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(num_pages) *
                                                    layout.score_elems());
  positions_ = std::make_unique_for_overwrite<std::int32_t[]>(static_cast<std::size_t>(num_pages) *
                                                              layout.score_elems());
}

std::size_t KvPool::bytes() const {
  return static_cast<std::size_t>(num_pages_) * (layout_.page_bytes() + layout_.score_elems() * 8);
}

}  // namespace strata::cpu
