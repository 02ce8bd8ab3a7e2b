// The host half of the resident page tables (see the header).
#include "cuda/table_store.h"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_set>

#include "runtime/error.h"

namespace strata::cuda {

std::size_t TableStore::max_ops(int rows, int layers) {
  // Per (sequence, layer): a copy of the kept entries, the rest written, a zero tail.
  return 3 * static_cast<std::size_t>(rows) * static_cast<std::size_t>(layers);
}

std::size_t TableStore::max_data(int rows, int layers, int pmax) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(layers) *
         static_cast<std::size_t>(pmax);
}

int TableStore::delta_entries(int rows, int layers, int pmax) {
  const std::size_t cap = std::size_t{1} << 20;
  return static_cast<int>(
      std::max<std::size_t>(std::min(max_data(rows, layers, pmax), cap), std::max(pmax, 1)));
}

TableStore::TableStore(int rows, int layers, int pmax)
    : rows_n_(rows), layers_(layers), pmax_(pmax) {
  if (max_data(rows, layers, pmax) > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw ConfigError("scheduler.max_num_seqs",
                      "the device page-table store of " + std::to_string(rows) + " x " +
                          std::to_string(layers) + " x " + std::to_string(pmax) +
                          " entries is past int32 indexing; use backend.device_tables: false");
  Row empty;
  empty.n.assign(static_cast<std::size_t>(layers), 0);  // the backend zeroes the store at start
  empty.own.assign(static_cast<std::size_t>(layers), 0);
  rows_.assign(static_cast<std::size_t>(rows), empty);
  next_ = rows_;
  where_.reserve(static_cast<std::size_t>(rows) * 2);
}

void TableStore::begin(std::span<const SeqKey> seqs, std::span<TableOp> ops,
                       std::span<std::int32_t> data) {
  const int S = static_cast<int>(seqs.size());
  if (S > rows_n_)
    throw InternalError("TableStore: " + std::to_string(S) + " sequences for " +
                        std::to_string(rows_n_) + " rows");
  ops_ = ops, data_ = data, nops_ = 0, ndata_ = 0, open_ = true;
  next_ = rows_;  // (vectors keep their capacity)
  ++clock_;
  const auto uS = static_cast<std::size_t>(S);
  row_of_.assign(uS, -1);
  src_of_.assign(uS, -1);
  taker_.assign(static_cast<std::size_t>(rows_n_), -1);
  source_.assign(static_cast<std::size_t>(rows_n_), 0);
  // The row each sequence holds (a repeated id, never in a valid plan, holds none).
  std::vector<int> home(uS, -1);
  std::vector<char> stranger(uS, 0);
  std::unordered_set<std::uint64_t> seen;
  seen.reserve(uS * 2);
  int n_dec = 0;
  for (int i = 0; i < S; ++i) {
    const SeqKey& k = seqs[static_cast<std::size_t>(i)];
    n_dec += k.decode;
    if (!seen.insert(k.seq_id).second) {
      stranger[static_cast<std::size_t>(i)] = 1;
      continue;
    }
    const auto it = where_.find(k.seq_id);
    if (it != where_.end()) home[static_cast<std::size_t>(i)] = it->second;
  }
  auto place = [&](int i, int r, int src) {
    const auto ui = static_cast<std::size_t>(i);
    const auto ur = static_cast<std::size_t>(r);
    row_of_[ui] = r;
    taker_[ur] = i;
    const SeqKey& k = seqs[ui];
    src_of_[ui] = src >= 0 && trusted(rows_[static_cast<std::size_t>(src)], k) ? src : -1;
    if (src_of_[ui] >= 0 && src != r) source_[static_cast<std::size_t>(src)] = 1;
  };
  // 1. Decode sequences already on a row < n_dec keep it; 2. the others take the free rows
  // < n_dec, their tables moving there from the row they held (if any).
  for (int i = 0; i < S; ++i) {
    const int h = home[static_cast<std::size_t>(i)];
    if (seqs[static_cast<std::size_t>(i)].decode && h >= 0 && h < n_dec) place(i, h, h);
  }
  int next_free = 0;
  for (int i = 0; i < S; ++i) {
    if (!seqs[static_cast<std::size_t>(i)].decode || row_of_[static_cast<std::size_t>(i)] >= 0)
      continue;
    while (taker_[static_cast<std::size_t>(next_free)] >= 0) ++next_free;
    place(i, next_free, home[static_cast<std::size_t>(i)]);
  }
  // 3. Other sequences on a row >= n_dec keep it; 4. the rest take rows >= n_dec that no
  // sequence of the step uses or reads: never used first, then the least recently used. When
  // moves leave too few, a move becomes a full upload and frees its source.
  for (int i = 0; i < S; ++i) {
    const int h = home[static_cast<std::size_t>(i)];
    if (!seqs[static_cast<std::size_t>(i)].decode && h >= n_dec) place(i, h, h);
  }
  std::vector<int> spare;
  for (int r = n_dec; r < rows_n_; ++r)
    if (taker_[static_cast<std::size_t>(r)] < 0 && !source_[static_cast<std::size_t>(r)])
      spare.push_back(r);
  std::sort(spare.begin(), spare.end(), [&](int a, int b) {
    const Row& x = rows_[static_cast<std::size_t>(a)];
    const Row& y = rows_[static_cast<std::size_t>(b)];
    if (x.held != y.held) return !x.held;
    if (x.used != y.used) return x.used < y.used;
    return a < b;
  });
  std::size_t next_spare = 0;
  int cancel = 0;  // decode sequences whose move may be cancelled
  for (int i = 0; i < S; ++i) {
    if (seqs[static_cast<std::size_t>(i)].decode || row_of_[static_cast<std::size_t>(i)] >= 0)
      continue;
    if (next_spare == spare.size()) {
      for (; cancel < S; ++cancel) {
        const auto uc = static_cast<std::size_t>(cancel);
        const int src = src_of_[uc];
        if (seqs[uc].decode && src >= 0 && src != row_of_[uc]) {
          src_of_[uc] = -1;
          source_[static_cast<std::size_t>(src)] = 0;
          spare.push_back(src);
          ++cancel;
          break;
        }
      }
      if (next_spare == spare.size())
        throw InternalError("TableStore: no free row for sequence " +
                            std::to_string(seqs[static_cast<std::size_t>(i)].seq_id));
    }
    place(i, spare[next_spare++], -1);
  }
  // The rows' owners after the step: a sequence's row is its own, the row it left and rows
  // it took from absent sequences are nobody's.
  for (int i = 0; i < S; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    const int h = home[ui];
    if (h >= 0 && h != row_of_[ui]) next_[static_cast<std::size_t>(h)].held = false;
  }
  for (int i = 0; i < S; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    Row& r = next_[static_cast<std::size_t>(row_of_[ui])];
    r.held = !stranger[ui];
    r.seq_id = seqs[ui].seq_id;
    r.serial = stranger[ui] ? 0 : seqs[ui].serial;
    r.used = clock_;
  }
}

void TableStore::emit(std::int32_t dst, std::int32_t count, std::int32_t kind, std::int32_t arg) {
  if (static_cast<std::size_t>(nops_) >= ops_.size())
    throw InternalError("TableStore: more than " + std::to_string(ops_.size()) + " ops");
  ops_[static_cast<std::size_t>(nops_++)] = TableOp{dst, count, kind, arg};
}

void TableStore::stage(int i, int layer, std::span<const std::int32_t> pages, bool own, int kept) {
  const auto ui = static_cast<std::size_t>(i);
  const auto ul = static_cast<std::size_t>(layer);
  const int row = row_of_[ui];
  const int n = static_cast<int>(std::min<std::size_t>(pages.size(), pmax_));
  const int src = src_of_[ui];
  int keep = 0;
  if (own && src >= 0 && rows_[static_cast<std::size_t>(src)].own[ul])
    keep = std::min({kept, rows_[static_cast<std::size_t>(src)].n[ul], n});
  keep = std::max(keep, 0);
  const std::int32_t at = (row * layers_ + layer) * pmax_;
  if (keep > 0 && src != row) emit(at, keep, kTableCopy, (src * layers_ + layer) * pmax_);
  if (n - keep == 1) {
    emit(at + keep, 1, kTableFill, pages[static_cast<std::size_t>(keep)]);
  } else if (n > keep) {
    if (static_cast<std::size_t>(ndata_ + n - keep) > data_.size())
      throw InternalError("TableStore: more than " + std::to_string(data_.size()) + " page ids");
    std::copy(pages.begin() + keep, pages.begin() + n, data_.begin() + ndata_);
    emit(at + keep, n - keep, kTableWrite, ndata_);
    ndata_ += n - keep;
  }
  Row& d = next_[static_cast<std::size_t>(row)];
  // What the row held before the step (a moved table's destination held someone else's).
  const int old_n = rows_[static_cast<std::size_t>(row)].n[ul];
  if (old_n > n) emit(at + n, old_n - n, kTableFill, 0);
  d.n[ul] = n;
  d.own[ul] = own;
}

std::vector<TableRound> TableStore::rounds(int data_cap) const {
  std::vector<TableRound> out;
  if (nops_ == 0) return out;
  TableRound cur;
  for (int o = 0; o < nops_; ++o) {
    const TableOp& op = ops_[static_cast<std::size_t>(o)];
    const int need = op.kind == kTableWrite ? op.count : 0;
    if (cur.num_ops > 0 && cur.num_data + need > data_cap) {
      out.push_back(cur);
      cur = TableRound{o, 0, cur.first_data + cur.num_data, 0};
    }
    ++cur.num_ops;
    cur.num_data += need;
  }
  out.push_back(cur);
  return out;
}

void TableStore::commit() {
  if (!open_) return;
  open_ = false;
  rows_.swap(next_);
  where_.clear();
  for (int r = 0; r < rows_n_; ++r)
    if (rows_[static_cast<std::size_t>(r)].held)
      where_[rows_[static_cast<std::size_t>(r)].seq_id] = r;
}

void TableStore::forget() {
  open_ = false;
  where_.clear();
  for (Row& r : rows_) {
    r.held = false;
    r.serial = 0;
    std::fill(r.n.begin(), r.n.end(), pmax_);  // unknown contents: cleared whole when written
    std::fill(r.own.begin(), r.own.end(), 0);
  }
}

}  // namespace strata::cuda
