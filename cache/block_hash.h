// Names of KV blocks for the prefix cache (cache/prefix_cache.h, docs/sparsity.md "Prefix
// cache"): block b of a prompt (tokens [16b, 16b + 16), kBlockSize) is named by a hash chained
// over its tokens and its parent's name, so a name stands for the whole prefix up to the end
// of the block. The chain starts at a root that mixes in everything else that changes the
// block's K/V bytes or must keep caches apart: the model identity (weights, dtype,
// quantization) and the request's cache_salt (vLLM's tenant isolation).
//
// 128 bits, two independent 64-bit lanes (not cryptographic: a collision needs ~2^64 blocks;
// vLLM's default builtin hash is no stronger). Plain header (std only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace strata {

struct BlockHash {
  std::uint64_t hi = 0, lo = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

struct BlockHashHasher {
  std::size_t operator()(const BlockHash& h) const { return static_cast<std::size_t>(h.lo); }
};

// The chain's root: model identity and cache_salt, each length-prefixed (so "ab" + "c" and
// "a" + "bc" differ; an empty salt differs from none only by content, as in vLLM).
BlockHash prefix_root(std::string_view model_identity, std::string_view cache_salt);

// The names of the FULL blocks of tokens[0, n): n / kBlockSize entries, entry b chained from
// entry b - 1 (entry 0 from `root`). A partial last block has no name (it is never shared).
std::vector<BlockHash> block_hashes(const BlockHash& root, const std::int32_t* tokens,
                                    std::size_t n);

}  // namespace strata
