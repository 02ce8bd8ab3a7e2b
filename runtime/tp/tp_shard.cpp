#include "runtime/tp/tp_shard.h"

#include <cstring>

#include "runtime/error.h"

namespace strata {

void validate_tp(const ModelConfig& c, int size) {
  const std::string key = "backend.tp_size";
  if (size < 1) throw ConfigError(key, "must be >= 1, got " + std::to_string(size));
  if (size == 1) return;
  if (c.num_key_value_heads % size != 0)
    throw ConfigError(key, std::to_string(size) + " does not divide the model's " +
                               std::to_string(c.num_key_value_heads) +
                               " KV heads (each rank keeps whole KV heads and their query groups)");
  if (c.intermediate_size % size != 0)
    throw ConfigError(key, std::to_string(size) + " does not divide the intermediate size " +
                               std::to_string(c.intermediate_size));
  if (c.vocab_size < size)
    throw ConfigError(
        key, std::to_string(size) + " ranks for a vocabulary of " + std::to_string(c.vocab_size));
}

TpShard make_tp_shard(const ModelConfig& c, int rank, int size) {
  validate_tp(c, size);
  if (rank < 0 || rank >= size)
    throw ConfigError("backend.tp_rank", "rank " + std::to_string(rank) + " outside [0, " +
                                             std::to_string(size) + ")");
  TpShard s;
  s.rank = rank;
  s.size = size;
  s.kv_heads = c.num_key_value_heads / size;
  s.kv_begin = rank * s.kv_heads;
  const int g = c.num_attention_heads / c.num_key_value_heads;
  s.q_heads = s.kv_heads * g;
  s.q_begin = s.kv_begin * g;
  s.inter = c.intermediate_size / size;
  s.inter_begin = rank * s.inter;
  s.vocab_slice = (c.vocab_size + size - 1) / size;
  s.vocab_begin = std::min(c.vocab_size, rank * s.vocab_slice);
  s.vocab = std::min(c.vocab_size, s.vocab_begin + s.vocab_slice) - s.vocab_begin;
  return s;
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

TpSlice tp_slice(const ModelConfig& c, const TpShard& sh, const std::string& name) {
  const std::int64_t hd = c.head_dim;
  if (name == "lm_head.weight") return {TpSplit::kRows, sh.vocab_begin, sh.vocab};
  if (name.rfind("model.layers.", 0) != 0) return {};
  if (ends_with(name, ".self_attn.q_proj.weight"))
    return {TpSplit::kRows, sh.q_begin * hd, sh.q_heads * hd};
  if (ends_with(name, ".self_attn.k_proj.weight") || ends_with(name, ".self_attn.v_proj.weight"))
    return {TpSplit::kRows, sh.kv_begin * hd, sh.kv_heads * hd};
  if (ends_with(name, ".self_attn.o_proj.weight"))
    return {TpSplit::kCols, sh.q_begin * hd, sh.q_heads * hd};
  if (ends_with(name, ".mlp.gate_proj.weight") || ends_with(name, ".mlp.up_proj.weight"))
    return {TpSplit::kRows, sh.inter_begin, sh.inter};
  if (ends_with(name, ".mlp.down_proj.weight")) return {TpSplit::kCols, sh.inter_begin, sh.inter};
  return {};
}

std::vector<std::int64_t> slice_shape(const std::vector<std::int64_t>& shape, const TpSlice& s) {
  auto out = shape;
  if (s.split == TpSplit::kRows) out.at(0) = s.count;
  if (s.split == TpSplit::kCols) out.at(1) = s.count;
  return out;
}

std::vector<ByteRange> slice_ranges(const TensorView& t, const TpSlice& s) {
  const std::size_t eb = dtype_bytes(t.dtype);
  if (s.split == TpSplit::kReplicated) return {{0, t.bytes}};
  auto bad = [&](const std::string& why) {
    return ModelError(t.file + ": tensor '" + t.name + "': tensor-parallel slice " + why);
  };
  if (t.shape.size() != 2) throw bad("of a tensor that is not 2-D");
  const std::int64_t rows = t.shape[0], cols = t.shape[1];
  const std::int64_t extent = s.split == TpSplit::kRows ? rows : cols;
  if (s.begin < 0 || s.count < 0 || s.begin + s.count > extent)
    throw bad("[" + std::to_string(s.begin) + ", " + std::to_string(s.begin + s.count) +
              ") outside " + std::to_string(extent));
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * eb;
  if (s.split == TpSplit::kRows)
    return {{static_cast<std::size_t>(s.begin) * row_bytes,
             static_cast<std::size_t>(s.count) * row_bytes}};
  std::vector<ByteRange> r(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i)
    r[static_cast<std::size_t>(i)] = {
        static_cast<std::size_t>(i) * row_bytes + static_cast<std::size_t>(s.begin) * eb,
        static_cast<std::size_t>(s.count) * eb};
  return r;
}

void read_slice(const TensorView& t, const TpSlice& s, std::byte* out) {
  for (const auto& r : slice_ranges(t, s)) {
    std::memcpy(out, t.data + r.offset, r.bytes);
    out += r.bytes;
  }
}

std::vector<float> read_slice_f32(const TensorView& t, const TpSlice& s) {
  if (s.split == TpSplit::kReplicated) return t.to_float();
  std::vector<std::byte> raw;
  for (const auto& r : slice_ranges(t, s)) {
    const auto n = raw.size();
    raw.resize(n + r.bytes);
    std::memcpy(raw.data() + n, t.data + r.offset, r.bytes);
  }
  TensorView v = t;  // same dtype, over the gathered bytes
  v.shape = slice_shape(t.shape, s);
  v.data = raw.data();
  v.bytes = raw.size();
  return v.to_float();
}

}  // namespace strata
