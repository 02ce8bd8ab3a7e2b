// Tensor-parallel sharding of a Llama model (DESIGN.md §5, docs/tensor-parallel.md), in one
// place for the CPU and CUDA backends.
//
// For rank r of n:
//   q_proj, k_proj, v_proj  column-parallel by heads: rank r keeps KV heads
//                           [r*kv/n, (r+1)*kv/n) and the query heads of those KV groups
//                           (rows of q/k/v, HF layout [out][in]);
//   o_proj                  row-parallel: the matching q-dim columns (an all-reduce sums the
//                           ranks' partial outputs);
//   gate_proj, up_proj      column-parallel: intermediate rows [r*I/n, (r+1)*I/n);
//   down_proj               row-parallel: the matching intermediate columns (all-reduce);
//   lm_head                 split over the vocabulary in slices of ceil(V/n) rows: rank r
//                           has [r*ceil(V/n), min(V, (r+1)*ceil(V/n))) (the last slice may
//                           be shorter; a backend that needs equal slices, e.g. for
//                           ncclAllGather, pads to `vocab_slice` rows);
//   embed_tokens, norms     replicated (the embedding lookup needs every row; with tied
//                           embeddings the lm_head slice is cut from the embedding).
// n must divide num_key_value_heads and intermediate_size and be <= vocab_size.
//
// Pre-quantized FP8 checkpoints (docs/checkpoints.md): a linear's F8_E4M3 codes split like
// its weight (slices count elements, one byte each). Its `weight_scale` / `input_scale`
// tensors are not split by name (tp_slice replicates unknown names): a rank takes the scales
// of the rows it keeps with Fp8Weight::row_scales (model_loader.h) — rows [begin, begin+count)
// for a kRows slice, every row for kCols — and a per-tensor scale is the same on every rank.
//
// Reading a shard touches only its bytes: a row split is one contiguous byte range of the
// tensor, a column split is one range per row. The safetensors files are memory-mapped, so
// a rank reading its ranges faults in only those pages (no whole-file read per rank).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"

namespace strata {

struct TpShard {
  int rank = 0, size = 1;
  int kv_begin = 0, kv_heads = 0;  // local KV heads
  int q_begin = 0, q_heads = 0;    // local query heads (kv_heads * gqa ratio)
  int inter_begin = 0, inter = 0;  // local intermediate rows
  int vocab_begin = 0, vocab = 0;  // local vocabulary rows (last slice may be shorter)
  int vocab_slice = 0;             // ceil(V/n): the padded slice every rank reserves
};

// Throws ConfigError("backend.tp_size", ...) when the model cannot be split n ways.
void validate_tp(const ModelConfig& c, int size);
TpShard make_tp_shard(const ModelConfig& c, int rank, int size);

enum class TpSplit : std::uint8_t {
  kReplicated,  // whole tensor
  kRows,        // rows [begin, begin+count) of a 2-D tensor (column-parallel / vocab)
  kCols,        // columns [begin, begin+count) of every row (row-parallel)
};

// How one HF tensor of a Llama checkpoint is split for `shard` (rows/columns in elements).
struct TpSlice {
  TpSplit split = TpSplit::kReplicated;
  std::int64_t begin = 0, count = 0;
};
// By HF name ("model.layers.3.self_attn.q_proj.weight", "lm_head.weight", ...); unknown
// names are replicated.
TpSlice tp_slice(const ModelConfig& c, const TpShard& shard, const std::string& hf_name);

// The shape of the slice of a tensor of `shape`.
std::vector<std::int64_t> slice_shape(const std::vector<std::int64_t>& shape, const TpSlice& s);

// Byte ranges (offsets from the tensor's first byte) that hold the slice, in output order.
struct ByteRange {
  std::size_t offset = 0, bytes = 0;
};
std::vector<ByteRange> slice_ranges(const TensorView& t,
                                    const TpSlice& s);  // ModelError on bad slices

// Copies the slice's raw bytes (dtype unchanged) to `out` (slice numel * dtype bytes),
// reading only slice_ranges(t, s).
void read_slice(const TensorView& t, const TpSlice& s, std::byte* out);
// The slice converted to fp32, reading only slice_ranges(t, s).
std::vector<float> read_slice_f32(const TensorView& t, const TpSlice& s);

}  // namespace strata
