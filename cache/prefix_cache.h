// The prefix cache's block table (DESIGN.md §8, docs/sparsity.md "Prefix cache"): cached
// blocks by name (cache/block_hash.h), each holding one page per model layer (the dense K/V of
// its 16 positions in that layer), the number of sequences using it, and two eviction orders.
// It knows pages only as ids: the cache manager (cache/kv_cache_manager.h) gives the table one
// pool reference per page at insert() and takes it back when the block is evicted, keeps the
// reservation arithmetic, and tells the table, page by page, which of a block's pages only the
// table references (pool ref count 1: add_table_only()).
//
// A page only the table references can be freed at any time without touching a sequence, so it
// counts as available memory (pages_evictable()). An unused block (users 0) holds only such
// pages. A block in use can hold some too: a sparse layer drops the prompt's temp pages after
// its selection (kSelect), so the sparse-layer pages of a decoding sequence's blocks are the
// table's alone while its full-layer pages stay shared. When an allocation finds no free page,
// unused blocks are evicted first (LRU, evict_unused()), then blocks in use that hold table-only
// pages (evict_in_use(), in the order they came to hold them: the longest first): such a block
// leaves the index (it is no longer hit) and the table drops its references; the pages its
// users hold stay theirs. It stays behind as a detached husk, unreachable, until its users
// release() it (then its id may be reused: a sequence never names a reused id).
// Evicting a block whose children are cached leaves them unreachable until they are evicted in
// turn (vLLM does the same); release order puts a prefix's tail blocks before its head in the
// LRU, so tails go first.
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
  // each), one user (the sequence that computed it) and no table-only page. InternalError when
  // `h` is cached or the page count is not the layer count.
  int insert(const BlockHash& h, std::vector<std::int32_t> pages);
  void acquire(int block);  // +1 user; an unused block leaves the LRU
  // -1 user; at 0 a cached block joins the LRU as the most recently used (all its pages must be
  // table-only then), a detached husk is gone (its id may be reused).
  void release(int block);
  // `delta` (+-1) pages of a cached block became / stopped being table-only (the manager saw
  // the page's pool ref count reach / leave 1). InternalError outside [0, num_layers].
  void add_table_only(int block, int delta);
  // Removes the least recently used unused block; its pages are appended to *pages (the
  // caller drops the table's references: every one frees its page). false when none is unused.
  bool evict_unused(std::vector<std::int32_t>* pages);
  // Removes the block in use that has held table-only pages longest (after evict_unused() found
  // nothing): it leaves the index and becomes a husk until its users release it; its pages are
  // appended to *pages (the caller drops the table's references: the table-only ones are freed,
  // the others stay with the users, and the caller tells the husk which with
  // set_husk_pages()). Returns its id, -1 when no block in use holds a table-only page.
  int evict_in_use(std::vector<std::int32_t>* pages);
  // The pages of husk `block` its users still hold (the ones sequences may share), and one of
  // them freed by its last holder (users of one block may hold different layers' pages).
  void set_husk_pages(int block, std::vector<std::int32_t> pages);
  void drop_husk_page(int block, std::int32_t page);

  // Is `block` a cached block or a husk (an id a sequence may name)?
  bool named(int block) const {
    return block >= 0 && block < static_cast<int>(blocks_.size()) &&
           blocks_[static_cast<std::size_t>(block)].state != State::kDead;
  }
  // Of a cached block or a husk (a husk's pages: those its users still hold).
  const std::vector<std::int32_t>& pages(int block) const { return at(block).pages; }
  const BlockHash& hash(int block) const { return at(block).hash; }
  int users(int block) const { return at(block).users; }
  int table_only(int block) const { return at(block).table_only; }  // 0 for a husk
  bool detached(int block) const { return at(block).state == State::kDetached; }

  int num_layers() const { return num_layers_; }
  int blocks() const { return static_cast<int>(index_.size()); }  // cached (indexed) blocks
  int unused_blocks() const { return static_cast<int>(lru_.size()); }
  int husks() const { return husks_; }
  int pages_held() const { return blocks() * num_layers_; }  // table references
  // Pages only the table references, over cached blocks in use or not: free memory on demand.
  int pages_evictable() const { return table_only_; }
  // Ids of the cached blocks / husks (tests, check_invariants), any order.
  std::vector<int> live_blocks() const;
  std::vector<int> husk_blocks() const;
  // Recount: index, both eviction orders, users and table-only counts agree (InternalError
  // naming what differs).
  void check() const;

 private:
  enum class State : std::uint8_t { kDead, kCached, kDetached };
  struct Block {
    BlockHash hash;
    std::vector<std::int32_t> pages;  // [num_layers]; a husk: those its users hold
    int users = 0;
    int table_only = 0;  // of `pages`, those only the table references (cached blocks)
    State state = State::kDead;
    // In lru_ when cached and unused; in in_use_ when cached, used and table_only > 0.
    std::list<int>::iterator pos;
    bool listed = false;
  };
  const Block& at(int block) const;
  Block& at(int block);
  void unlist(Block& b);
  void relist(int id, Block& b);  // into the order its state says (none, lru_ or in_use_)
  void remove(int id, Block& b, std::vector<std::int32_t>* pages);

  int num_layers_;
  std::vector<Block> blocks_;  // by id; dead entries are reused
  std::vector<int> dead_;      // ids of dead entries
  std::unordered_map<BlockHash, int, BlockHashHasher> index_;
  std::list<int> lru_;     // unused blocks, front = least recently used (evicted first)
  std::list<int> in_use_;  // blocks in use with table-only pages, front = evicted first
  int table_only_ = 0;     // sum over cached blocks
  int husks_ = 0;
};

}  // namespace strata
