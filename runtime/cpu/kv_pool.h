// The CPU backend's KV storage: `num_pages` pages laid out as runtime/kv_layout.h says
// (K part then V part, [kv_head][slot][head_dim]) of fp32 values (elem_bytes 4) or e4m3 codes
// (elem_bytes 1, cache.kv_dtype fp8: the scales are the backend's, runtime/kv_scales.h), plus
// one fp32 score per (page, kv_head,
// slot), [kv_head][slot] per page, and the token position each slot was written for (int32,
// same shape: the admin console's census of kept positions, SeqStep::report_kept). Memory is
// reserved once and never initialised in bulk: a slot is always written before it is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/kv_layout.h"

namespace strata::cpu {

class KvPool {
 public:
  KvPool(KvLayout layout, int num_pages);  // layout.elem_bytes must be 4 or 1

  const KvLayout& layout() const { return layout_; }
  int num_pages() const { return num_pages_; }
  std::size_t bytes() const;

  // head_dim elements (elem_bytes each: fp32 values or e4m3 codes) of one slot; slot in
  // [0, kBlockSize).
  std::byte* k_bytes(int page, int head, int slot) {
    return page_base(page) + layout_.k_offset(head, slot) * layout_.elem_bytes;
  }
  std::byte* v_bytes(int page, int head, int slot) {
    return page_base(page) + layout_.v_offset(head, slot) * layout_.elem_bytes;
  }
  // The same as fp32 values: only for an fp32 pool (elem_bytes 4).
  float* k(int page, int head, int slot) {
    return reinterpret_cast<float*>(k_bytes(page, head, slot));
  }
  float* v(int page, int head, int slot) {
    return reinterpret_cast<float*>(v_bytes(page, head, slot));
  }
  float* score(int page, int head, int slot) {
    return scores_.get() + static_cast<std::size_t>(page) * layout_.score_elems() +
           static_cast<std::size_t>(head) * kBlockSize + slot;
  }
  std::int32_t* position(int page, int head, int slot) {
    return positions_.get() + static_cast<std::size_t>(page) * layout_.score_elems() +
           static_cast<std::size_t>(head) * kBlockSize + slot;
  }

 private:
  std::byte* page_base(int page) {
    return kv_.get() + static_cast<std::size_t>(page) * layout_.page_bytes();
  }
  KvLayout layout_;
  int num_pages_ = 0;
  std::unique_ptr<std::byte[]> kv_;            // [num_pages][page_bytes]
  std::unique_ptr<float[]> scores_;            // [num_pages][kv_heads][kBlockSize]
  std::unique_ptr<std::int32_t[]> positions_;  // [num_pages][kv_heads][kBlockSize]
};

}  // namespace strata::cpu
