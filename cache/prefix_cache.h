// The prefix cache's block table (DESIGN.md §8, docs/sparsity.md "Prefix cache"): cached
// blocks by name (cache/block_hash.h), each holding one page per model layer (the dense K/V of
// its 16 positions in that layer), the number of sequences using it, and the LRU order of the
// unused ones. It knows pages only as ids: the cache manager (cache/kv_cache_manager.h) gives
// the table one pool reference per page at insert() and takes it back at evict_one(), and
// keeps the reservation arithmetic.
//
// An unused block (users 0) is held only by the table: its pages can be freed at any time, so
// they count as available memory; blocks in use are never evicted. Evicting a block whose
// children are cached leaves them unreachable until they are evicted in turn (vLLM does the
// same); release order puts a prefix's tail blocks before its head in the LRU, so tails go first.
//
// Not thread-safe (owned by the cache manager, one strand).
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"

namespace strata {

class PrefixCache {
 public:
  explicit PrefixCache(int num_layers) : num_layers_(num_layers) {}

  // Block id of `h`, or -1.
  int find(const BlockHash& h) const;
  // Leading entries of `hashes` (at most max_blocks) that are cached, their ids into *ids
  // (cleared first). Returns the count. Changes nothing (no LRU touch).
  int match(const std::vector<BlockHash>& hashes, int max_blocks, std::vector<int>* ids) const;

  // A new block named `h` with `pages` (one per layer, the table now owns one reference of
  // each) and one user (the sequence that computed it). InternalError when `h` is cached or
  // the page count is not the layer count.
  int insert(const BlockHash& h, std::vector<std::int32_t> pages);
  void acquire(int block);  // +1 user; an unused block leaves the LRU
  void release(int block);  // -1 user; at 0 it joins the LRU as the most recently used
  // Removes the least recently used unused block; its pages are appended to *pages (the
  // caller drops the table's references). false when every block is in use.
  bool evict_one(std::vector<std::int32_t>* pages);

  const std::vector<std::int32_t>& pages(int block) const { return at(block).pages; }
  const BlockHash& hash(int block) const { return at(block).hash; }
  int users(int block) const { return at(block).users; }
  int num_layers() const { return num_layers_; }
  int blocks() const { return static_cast<int>(index_.size()); }
  int unused_blocks() const { return static_cast<int>(lru_.size()); }
  int pages_held() const { return blocks() * num_layers_; }
  int pages_evictable() const { return unused_blocks() * num_layers_; }
  // Ids of the live blocks (tests, check_invariants), any order.
  std::vector<int> live_blocks() const;
  // Recount: index, LRU and users agree (InternalError naming what differs).
  void check() const;

 private:
  struct Block {
    BlockHash hash;
    std::vector<std::int32_t> pages;  // [num_layers]
    int users = 0;
    bool live = false;
    std::list<int>::iterator lru;  // valid when live && users == 0
  };
  const Block& at(int block) const;
  Block& at(int block);

  int num_layers_;
  std::vector<Block> blocks_;  // by id; dead entries are reused
  std::vector<int> dead_;      // ids of dead entries
  std::unordered_map<BlockHash, int, BlockHashHasher> index_;
  std::list<int> lru_;  // unused blocks, front = least recently used (evicted first)
};

}  // namespace strata
