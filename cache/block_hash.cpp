#include "cache/block_hash.h"

#include "runtime/kv_layout.h"

namespace strata {
namespace {

constexpr std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Lane constants: the two lanes see the same input through different keys.
constexpr std::uint64_t kLaneHi = 0x243F6A8885A308D3ull, kLaneLo = 0x13198A2E03707344ull;

struct Lanes {
  std::uint64_t hi, lo;
  void add(std::uint64_t v) {
    hi = mix(hi ^ (v + kLaneHi));
    lo = mix(lo ^ (v * 0xD6E8FEB86659FD93ull + kLaneLo));
  }
  void add(std::string_view s) {
    add(static_cast<std::uint64_t>(s.size()));
    for (unsigned char c : s) add(static_cast<std::uint64_t>(c));
  }
};

}  // namespace

BlockHash prefix_root(std::string_view model_identity, std::string_view cache_salt) {
  Lanes l{kLaneHi, kLaneLo};
  l.add(model_identity);
  l.add(cache_salt);
  return {l.hi, l.lo};
}

std::vector<BlockHash> block_hashes(const BlockHash& root, const std::int32_t* tokens,
                                    std::size_t n) {
  const std::size_t blocks = n / kBlockSize;
  std::vector<BlockHash> out;
  out.reserve(blocks);
  BlockHash parent = root;
  for (std::size_t b = 0; b < blocks; ++b) {
    Lanes l{parent.hi, parent.lo};
    for (std::size_t t = 0; t < static_cast<std::size_t>(kBlockSize); ++t)
      l.add(static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[b * kBlockSize + t])));
    parent = {l.hi, l.lo};
    out.push_back(parent);
  }
  return out;
}

}  // namespace strata
