#include "cache/prefix_cache.h"

#include <algorithm>
#include <string>

#include "runtime/error.h"

namespace strata {

const PrefixCache::Block& PrefixCache::at(int block) const {
  if (block < 0 || block >= static_cast<int>(blocks_.size()) ||
      !blocks_[static_cast<std::size_t>(block)].live)
    throw InternalError("PrefixCache: no block " + std::to_string(block));
  return blocks_[static_cast<std::size_t>(block)];
}

PrefixCache::Block& PrefixCache::at(int block) {
  return const_cast<Block&>(static_cast<const PrefixCache*>(this)->at(block));
}

int PrefixCache::find(const BlockHash& h) const {
  auto it = index_.find(h);
  return it == index_.end() ? -1 : it->second;
}

int PrefixCache::match(const std::vector<BlockHash>& hashes, int max_blocks,
                       std::vector<int>* ids) const {
  ids->clear();
  const int n = std::min(max_blocks, static_cast<int>(hashes.size()));
  for (int b = 0; b < n; ++b) {
    const int id = find(hashes[static_cast<std::size_t>(b)]);
    if (id < 0) break;
    ids->push_back(id);
  }
  return static_cast<int>(ids->size());
}

int PrefixCache::insert(const BlockHash& h, std::vector<std::int32_t> pages) {
  if (static_cast<int>(pages.size()) != num_layers_)
    throw InternalError("PrefixCache::insert: " + std::to_string(pages.size()) + " pages for " +
                        std::to_string(num_layers_) + " layers");
  if (index_.count(h)) throw InternalError("PrefixCache::insert: the block is already cached");
  int id;
  if (!dead_.empty()) {
    id = dead_.back();
    dead_.pop_back();
  } else {
    id = static_cast<int>(blocks_.size());
    blocks_.emplace_back();
  }
  Block& b = blocks_[static_cast<std::size_t>(id)];
  b.hash = h;
  b.pages = std::move(pages);
  b.users = 1;
  b.live = true;
  index_.emplace(h, id);
  return id;
}

void PrefixCache::acquire(int block) {
  Block& b = at(block);
  if (b.users++ == 0) lru_.erase(b.lru);
}

void PrefixCache::release(int block) {
  Block& b = at(block);
  if (b.users <= 0)
    throw InternalError("PrefixCache::release: block " + std::to_string(block) + " has no user");
  if (--b.users == 0) b.lru = lru_.insert(lru_.end(), block);
}

bool PrefixCache::evict_one(std::vector<std::int32_t>* pages) {
  if (lru_.empty()) return false;
  const int id = lru_.front();
  lru_.pop_front();
  Block& b = blocks_[static_cast<std::size_t>(id)];
  pages->insert(pages->end(), b.pages.begin(), b.pages.end());
  index_.erase(b.hash);
  b.pages.clear();
  b.live = false;
  dead_.push_back(id);
  return true;
}

std::vector<int> PrefixCache::live_blocks() const {
  std::vector<int> out;
  out.reserve(index_.size());
  for (const auto& [h, id] : index_) out.push_back(id);
  return out;
}

void PrefixCache::check() const {
  int live = 0, unused = 0;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    if (!b.live) continue;
    ++live;
    auto it = index_.find(b.hash);
    if (it == index_.end() || it->second != static_cast<int>(i))
      throw InternalError("PrefixCache: block " + std::to_string(i) + " is not indexed");
    if (b.users < 0) throw InternalError("PrefixCache: block " + std::to_string(i) + " users < 0");
    if (b.users == 0) ++unused;
    if (static_cast<int>(b.pages.size()) != num_layers_)
      throw InternalError("PrefixCache: block " + std::to_string(i) + " has the wrong page count");
  }
  if (live != static_cast<int>(index_.size()))
    throw InternalError("PrefixCache: index holds " + std::to_string(index_.size()) + " blocks, " +
                        std::to_string(live) + " live");
  if (unused != static_cast<int>(lru_.size()))
    throw InternalError("PrefixCache: " + std::to_string(unused) + " unused blocks, LRU holds " +
                        std::to_string(lru_.size()));
  for (int id : lru_)
    if (!blocks_[static_cast<std::size_t>(id)].live || blocks_[static_cast<std::size_t>(id)].users)
      throw InternalError("PrefixCache: LRU lists block " + std::to_string(id) + " in use");
}

}  // namespace strata
