// The page pool: page ids 0 .. num_pages-1 of one device pool (runtime/kv_layout.h: one page
// = 16 slots of K and V of ONE layer, all local KV heads). The pool hands out ids and counts
// them; the backend owns the bytes behind them (and the per-slot scores of sparse layers).
//
// O(1) alloc and release (a LIFO free list plus an index into it for O(1) removal checks),
// reference counts for future prefix sharing. Not thread-safe: owned by the cache manager
// on one strand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/kv_layout.h"

namespace strata {

class PagePool {
 public:
  // Throws ConfigError when num_pages < 0 or the layout is empty.
  PagePool(int num_pages, KvLayout layout);

  // One page with ref count 1, or -1 when none is free.
  std::int32_t alloc();
  // `n` pages appended to `out`, all or none: false (out untouched) when fewer are free.
  bool alloc(int n, std::vector<std::int32_t>* out);
  // +1 reference (sharing). InternalError on a bad or free id.
  void retain(std::int32_t id);
  // -1 reference; the page returns to the free list at 0 (returns true then).
  // InternalError on a bad id or a page that is already free (double free).
  bool release(std::int32_t id);

  int ref_count(std::int32_t id) const;  // 0 when free; InternalError on a bad id
  bool is_free(std::int32_t id) const { return ref_count(id) == 0; }

  int total() const { return static_cast<int>(refs_.size()); }
  int used() const { return total() - free(); }
  int free() const { return static_cast<int>(free_list_.size()); }

  const KvLayout& layout() const { return layout_; }
  std::size_t page_bytes() const { return layout_.page_bytes(); }  // K+V bytes of one page
  std::size_t slot_bytes() const { return page_bytes() / kBlockSize; }
  // fp32 score bytes next to a page of a sparse layer (held by the backend).
  std::size_t score_bytes() const { return layout_.score_elems() * sizeof(float); }
  std::size_t used_bytes() const { return static_cast<std::size_t>(used()) * page_bytes(); }
  std::size_t total_bytes() const { return static_cast<std::size_t>(total()) * page_bytes(); }

  // Recount from the reference counts (test/debug): throws InternalError if the free list and
  // the reference counts disagree (a page listed twice, a used page listed, a free one missing).
  void check() const;

 private:
  void check_id(std::int32_t id, const char* what) const;

  KvLayout layout_;
  std::vector<std::int32_t> refs_;       // [num_pages] reference counts
  std::vector<std::int32_t> free_list_;  // LIFO stack of free ids
};

}  // namespace strata
