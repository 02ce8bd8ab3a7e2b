// The CPU backend's KV storage: `num_pages` fp32 pages laid out as runtime/kv_layout.h says
// (K part then V part, [kv_head][slot][head_dim]) plus one fp32 score per (page, kv_head,
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
  KvPool(KvLayout layout, int num_pages);  // layout.elem_bytes must be 4

  const KvLayout& layout() const { return layout_; }
  int num_pages() const { return num_pages_; }
  std::size_t bytes() const;

  // head_dim floats of one slot; slot in [0, kBlockSize).
  float* k(int page, int head, int slot) { return page_base(page) + layout_.k_offset(head, slot); }
  float* v(int page, int head, int slot) { return page_base(page) + layout_.v_offset(head, slot); }
  float* score(int page, int head, int slot) {
    return scores_.get() + static_cast<std::size_t>(page) * layout_.score_elems() +
           static_cast<std::size_t>(head) * kBlockSize + slot;
  }
  std::int32_t* position(int page, int head, int slot) {
    return positions_.get() + static_cast<std::size_t>(page) * layout_.score_elems() +
           static_cast<std::size_t>(head) * kBlockSize + slot;
  }

 private:
  float* page_base(int page) {
    return kv_.get() + static_cast<std::size_t>(page) * layout_.page_elems();
  }
  KvLayout layout_;
  int num_pages_ = 0;
  std::unique_ptr<float[]> kv_;                // [num_pages][page_elems]
  std::unique_ptr<float[]> scores_;            // [num_pages][kv_heads][kBlockSize]
  std::unique_ptr<std::int32_t[]> positions_;  // [num_pages][kv_heads][kBlockSize]
};

}  // namespace strata::cpu
