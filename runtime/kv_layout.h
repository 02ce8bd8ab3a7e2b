// The KV page layout shared by the cache manager, the CPU backend and the CUDA kernels.
// Plain header: compiles in host and CUDA translation units.
//
// One page holds `kBlockSize` token slots of K and V for ONE layer and all local KV heads:
//
//   page bytes = 2 (K,V) * kv_heads * kBlockSize * head_dim * elem_bytes
//   K part: [kv_head][slot][head_dim], then the V part with the same shape.
//
// so one head's 16 slots are contiguous (sparse layers keep different tokens per head).
// K is stored after RoPE at the token's true position (no re-rotation on compaction).
// Sparse layers additionally keep one fp32 score per (slot, kv_head), stored by the
// backend next to the page (`[kv_head][slot]`, `kBlockSize * kv_heads` floats per page).
// Page ids are dense int32 indices into the backend's pool, 0 <= id < num_pages.
//
// Element type: elem_bytes 4 = fp32 (CPU reference), 2 = bf16 (CUDA), 1 = e4m3 codes
// (cache.kv_dtype fp8, both backends): value = e4m3_to_float(code) * scale with one fixed fp32
// scale per (layer, KV head) for K and one for V (runtime/kv_scales.h). An fp8 page is half a
// bf16 page's bytes with the same 16 slots, so the same memory holds twice the pages.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata {

inline constexpr int kBlockSize = 16;  // token slots per page

// cache.kv_dtype: kBf16 = the backend's native KV type (bf16 on CUDA, fp32 on the CPU
// reference); kFp8 = e4m3 codes with per-(layer, KV head) scales.
enum class KvDtype : std::uint8_t { kBf16, kFp8 };

struct KvLayout {
  int kv_heads = 0;  // local KV heads (after tensor-parallel split)
  int head_dim = 0;
  int elem_bytes = 2;  // 2 = bf16 (CUDA), 4 = fp32 (CPU reference), 1 = e4m3 (kv_dtype fp8)

  constexpr bool fp8() const { return elem_bytes == 1; }

  constexpr std::size_t head_stride() const {  // elements between heads of one K (or V) part
    return static_cast<std::size_t>(kBlockSize) * head_dim;
  }
  constexpr std::size_t part_elems() const {  // elements of the K part (= of the V part)
    return static_cast<std::size_t>(kv_heads) * head_stride();
  }
  constexpr std::size_t page_elems() const { return 2 * part_elems(); }
  constexpr std::size_t page_bytes() const { return page_elems() * elem_bytes; }
  // Element offsets inside a page.
  constexpr std::size_t k_offset(int head, int slot) const {
    return static_cast<std::size_t>(head) * head_stride() +
           static_cast<std::size_t>(slot) * head_dim;
  }
  constexpr std::size_t v_offset(int head, int slot) const {
    return part_elems() + k_offset(head, slot);
  }
  // Score floats per page for sparse layers: [kv_head][slot].
  constexpr std::size_t score_elems() const {
    return static_cast<std::size_t>(kv_heads) * kBlockSize;
  }
};

constexpr int pages_for_slots(int slots) {
  return (slots + kBlockSize - 1) / kBlockSize;
}

}  // namespace strata
