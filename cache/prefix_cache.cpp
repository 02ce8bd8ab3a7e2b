#include "cache/prefix_cache.h"

#include <algorithm>
#include <string>

#include "runtime/error.h"

namespace strata {

const PrefixCache::Block& PrefixCache::at(int block) const {
  if (block < 0 || block >= static_cast<int>(blocks_.size()) ||
      blocks_[static_cast<std::size_t>(block)].state == State::kDead)
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

void PrefixCache::unlist(Block& b) {
  if (!b.listed) return;
  (b.users == 0 ? lru_ : in_use_).erase(b.pos);
  b.listed = false;
}

void PrefixCache::relist(int id, Block& b) {
  if (b.state != State::kCached) return;
  if (b.users == 0) {
    b.pos = lru_.insert(lru_.end(), id);
    b.listed = true;
  } else if (b.table_only > 0) {
    b.pos = in_use_.insert(in_use_.end(), id);
    b.listed = true;
  }
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
  b.table_only = 0;
  b.state = State::kCached;
  b.listed = false;
  index_.emplace(h, id);
  return id;
}

void PrefixCache::acquire(int block) {
  Block& b = at(block);
  if (b.state != State::kCached)
    throw InternalError("PrefixCache::acquire: block " + std::to_string(block) + " was evicted");
  unlist(b);
  ++b.users;
  relist(block, b);
}

void PrefixCache::release(int block) {
  Block& b = at(block);
  if (b.users <= 0)
    throw InternalError("PrefixCache::release: block " + std::to_string(block) + " has no user");
  if (b.state == State::kDetached) {
    if (--b.users == 0) {
      if (!b.pages.empty())
        throw InternalError("PrefixCache::release: evicted block " + std::to_string(block) +
                            " loses its last user with pages still held");
      b.state = State::kDead;
      --husks_;
      dead_.push_back(block);
    }
    return;
  }
  if (b.users == 1 && b.table_only != num_layers_)
    throw InternalError("PrefixCache::release: block " + std::to_string(block) +
                        " loses its last user with " + std::to_string(num_layers_ - b.table_only) +
                        " pages still held elsewhere");
  unlist(b);
  --b.users;
  relist(block, b);
}

void PrefixCache::add_table_only(int block, int delta) {
  Block& b = at(block);
  if (b.state != State::kCached || b.table_only + delta < 0 || b.table_only + delta > num_layers_)
    throw InternalError("PrefixCache::add_table_only: block " + std::to_string(block) + " " +
                        std::to_string(b.table_only) + " + " + std::to_string(delta));
  const bool was = b.table_only > 0;
  b.table_only += delta;
  table_only_ += delta;
  // Only a block in use moves between orders (an unused one stays in the LRU).
  if (b.users > 0 && was != (b.table_only > 0)) {
    unlist(b);
    relist(block, b);
  }
}

void PrefixCache::remove(int id, Block& b, std::vector<std::int32_t>* pages) {
  unlist(b);
  pages->insert(pages->end(), b.pages.begin(), b.pages.end());
  index_.erase(b.hash);
  table_only_ -= b.table_only;
  b.table_only = 0;
  if (b.users == 0) {
    b.pages.clear();
    b.state = State::kDead;
    dead_.push_back(id);
  } else {
    b.state = State::kDetached;  // its users name it until they release it
    ++husks_;
  }
}

bool PrefixCache::evict_unused(std::vector<std::int32_t>* pages) {
  if (lru_.empty()) return false;
  const int id = lru_.front();
  remove(id, blocks_[static_cast<std::size_t>(id)], pages);
  return true;
}

int PrefixCache::evict_in_use(std::vector<std::int32_t>* pages) {
  if (in_use_.empty()) return -1;
  const int id = in_use_.front();
  remove(id, blocks_[static_cast<std::size_t>(id)], pages);
  return id;
}

void PrefixCache::set_husk_pages(int block, std::vector<std::int32_t> pages) {
  Block& b = at(block);
  if (b.state != State::kDetached)
    throw InternalError("PrefixCache::set_husk_pages: block " + std::to_string(block) +
                        " is not an evicted block in use");
  b.pages = std::move(pages);
}

void PrefixCache::drop_husk_page(int block, std::int32_t page) {
  Block& b = at(block);
  auto it = std::find(b.pages.begin(), b.pages.end(), page);
  if (b.state != State::kDetached || it == b.pages.end())
    throw InternalError("PrefixCache::drop_husk_page: page " + std::to_string(page) +
                        " is not in evicted block " + std::to_string(block));
  b.pages.erase(it);
}

std::vector<int> PrefixCache::live_blocks() const {
  std::vector<int> out;
  out.reserve(index_.size());
  for (const auto& [h, id] : index_) out.push_back(id);
  return out;
}

std::vector<int> PrefixCache::husk_blocks() const {
  std::vector<int> out;
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    if (blocks_[i].state == State::kDetached) out.push_back(static_cast<int>(i));
  return out;
}

void PrefixCache::check() const {
  int live = 0, unused = 0, in_use = 0, husks = 0, table_only = 0;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    const std::string name = "PrefixCache: block " + std::to_string(i);
    if (b.state == State::kDead) {
      if (b.listed) throw InternalError(name + " is dead but listed");
      continue;
    }
    if (b.users < 0) throw InternalError(name + " users < 0");
    if (b.state == State::kDetached) {
      if (static_cast<int>(b.pages.size()) > num_layers_)
        throw InternalError(name + " has the wrong page count");
      ++husks;
      if (b.users == 0) throw InternalError(name + " is a husk without users");
      if (b.listed || b.table_only != 0) throw InternalError(name + " is a husk but listed");
      auto it = index_.find(b.hash);
      if (it != index_.end() && it->second == static_cast<int>(i))
        throw InternalError(name + " is a husk but indexed");
      continue;
    }
    ++live;
    if (static_cast<int>(b.pages.size()) != num_layers_)
      throw InternalError(name + " has the wrong page count");
    auto it = index_.find(b.hash);
    if (it == index_.end() || it->second != static_cast<int>(i))
      throw InternalError(name + " is not indexed");
    if (b.table_only < 0 || b.table_only > num_layers_)
      throw InternalError(name + " counts " + std::to_string(b.table_only) + " table-only pages");
    table_only += b.table_only;
    if (b.users == 0) {
      ++unused;
      if (b.table_only != num_layers_)
        throw InternalError(name + " is unused but holds pages shared with sequences");
    } else if (b.table_only > 0) {
      ++in_use;
    }
    if (b.listed != (b.users == 0 || b.table_only > 0))
      throw InternalError(name + (b.listed ? " is listed" : " is not listed") +
                          " for eviction, wrongly");
  }
  if (live != static_cast<int>(index_.size()))
    throw InternalError("PrefixCache: index holds " + std::to_string(index_.size()) + " blocks, " +
                        std::to_string(live) + " live");
  if (unused != static_cast<int>(lru_.size()))
    throw InternalError("PrefixCache: " + std::to_string(unused) + " unused blocks, LRU holds " +
                        std::to_string(lru_.size()));
  if (in_use != static_cast<int>(in_use_.size()))
    throw InternalError("PrefixCache: " + std::to_string(in_use) +
                        " blocks in use with table-only pages, the order holds " +
                        std::to_string(in_use_.size()));
  if (husks != husks_)
    throw InternalError("PrefixCache: " + std::to_string(husks) + " husks, counter " +
                        std::to_string(husks_));
  if (table_only != table_only_)
    throw InternalError("PrefixCache: " + std::to_string(table_only) +
                        " table-only pages, counter " + std::to_string(table_only_));
  for (int id : lru_) {
    const Block& b = blocks_[static_cast<std::size_t>(id)];
    if (b.state != State::kCached || b.users)
      throw InternalError("PrefixCache: LRU lists block " + std::to_string(id) + " in use");
  }
  for (int id : in_use_) {
    const Block& b = blocks_[static_cast<std::size_t>(id)];
    if (b.state != State::kCached || b.users == 0 || b.table_only == 0)
      throw InternalError("PrefixCache: the in-use order lists block " + std::to_string(id) +
                          " wrongly");
  }
}

}  // namespace strata
