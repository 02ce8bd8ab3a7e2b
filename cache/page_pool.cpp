#include "cache/page_pool.h"

#include <string>

#include "runtime/error.h"

namespace strata {

PagePool::PagePool(int num_pages, KvLayout layout) : layout_(layout) {
  if (num_pages < 0)
    throw ConfigError("cache.num_pages", "must be >= 0, got " + std::to_string(num_pages));
  if (layout.kv_heads <= 0 || layout.head_dim <= 0 || layout.elem_bytes <= 0)
    throw ConfigError("cache.layout", "kv_heads, head_dim and elem_bytes must be > 0");
  refs_.assign(static_cast<std::size_t>(num_pages), 0);
  free_list_.reserve(static_cast<std::size_t>(num_pages));
  // Lowest ids on top of the stack: a fresh pool hands out 0, 1, 2, ...
  for (int id = num_pages - 1; id >= 0; --id) free_list_.push_back(id);
}

void PagePool::check_id(std::int32_t id, const char* what) const {
  if (id < 0 || id >= total())
    throw InternalError(std::string("PagePool::") + what + ": page id " + std::to_string(id) +
                        " out of range [0, " + std::to_string(total()) + ")");
}

std::int32_t PagePool::alloc() {
  if (free_list_.empty()) return -1;
  const std::int32_t id = free_list_.back();
  free_list_.pop_back();
  refs_[static_cast<std::size_t>(id)] = 1;
  return id;
}

bool PagePool::alloc(int n, std::vector<std::int32_t>* out) {
  if (n < 0) throw InternalError("PagePool::alloc: negative page count " + std::to_string(n));
  if (n > free()) return false;
  for (int i = 0; i < n; ++i) out->push_back(alloc());
  return true;
}

void PagePool::retain(std::int32_t id) {
  check_id(id, "retain");
  auto& r = refs_[static_cast<std::size_t>(id)];
  if (r == 0) throw InternalError("PagePool::retain: page " + std::to_string(id) + " is free");
  ++r;
}

bool PagePool::release(std::int32_t id) {
  check_id(id, "release");
  auto& r = refs_[static_cast<std::size_t>(id)];
  if (r == 0)
    throw InternalError("PagePool::release: page " + std::to_string(id) +
                        " is already free (double free)");
  if (--r > 0) return false;
  free_list_.push_back(id);
  return true;
}

int PagePool::ref_count(std::int32_t id) const {
  check_id(id, "ref_count");
  return refs_[static_cast<std::size_t>(id)];
}

void PagePool::check() const {
  std::vector<char> listed(refs_.size(), 0);
  for (std::int32_t id : free_list_) {
    check_id(id, "check");
    const auto i = static_cast<std::size_t>(id);
    if (listed[i])
      throw InternalError("PagePool: page " + std::to_string(id) + " listed free twice");
    if (refs_[i] != 0)
      throw InternalError("PagePool: page " + std::to_string(id) + " is on the free list with " +
                          std::to_string(refs_[i]) + " references");
    listed[i] = 1;
  }
  for (std::size_t i = 0; i < refs_.size(); ++i) {
    if (refs_[i] < 0)
      throw InternalError("PagePool: page " + std::to_string(i) + " has a negative count");
    if (refs_[i] == 0 && !listed[i])
      throw InternalError("PagePool: page " + std::to_string(i) +
                          " is free but not on the free list");
  }
}

}  // namespace strata
