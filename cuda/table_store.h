// Page tables resident on the device (issue 24 item 2; docs/cuda-backend.md "Page tables on the
// device"), the host half: which row of the device table store each sequence of a step uses,
// and the compact list of ops that turns what the store holds into this step's tables.
//
// The store is one fixed device array [rows][layers][pmax] int32 (the backend's d_tables: the
// CUDA graphs bake its address in), read by the kernels exactly as the whole-table upload laid it
// out: the decode kernel's batch index b is its table row, so decode-kernel sequences sit on rows
// [0, n_decode) and every other sequence of the step on a row >= n_decode. A sequence keeps its
// row from step to step when it can; otherwise its table moves on the device (a copy op, no
// upload). What a row holds is trusted only through the cache manager's export serials: a row
// that holds export X of a sequence, given a step whose SeqStep::table_base is X, keeps the
// LayerSlots::pages_kept leading entries of each layer and gets the rest uploaded; anything
// else (an unknown or unseen serial, temp or scratch tables, a duplicate sequence id) is a full
// upload of the row. Entries past a row's table are kept zero.
//
// Plain C++ with no CUDA header (tests/cuda/table_store_test.cpp runs it without a GPU).
// Not thread-safe: one per StepPlanner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace strata::cuda {

enum TableOpKind : std::int32_t {
  kTableWrite = 0,  // entries <- the step's page ids [arg, arg + count)
  kTableCopy = 1,   // entries <- store entries [arg, arg + count) (a row that moved)
  kTableFill = 2,   // entries <- arg (one new page, or 0 past a table that shrank)
};

// One contiguous run of one (row, layer) table. No two ops of a step write the same entry and no
// copy reads an entry any op of the step writes, so a step's ops run in any order, in parallel.
struct TableOp {
  std::int32_t dst = 0;    // first store entry written: (row * layers + layer) * pmax + first
  std::int32_t count = 0;  // entries (>= 1)
  std::int32_t kind = kTableWrite;
  std::int32_t arg =
      0;  // kTableWrite: first page-id index; kTableCopy: first entry; kTableFill: value
};
static_assert(sizeof(TableOp) == 16);

// A slice of a step's ops whose page ids fit the device's delta buffer (one upload + launch).
struct TableRound {
  int first_op = 0, num_ops = 0;
  int first_data = 0, num_data = 0;  // page ids [first_data, first_data + num_data)
};

class TableStore {
 public:
  // What the store needs to know of one sequence of a step.
  struct SeqKey {
    std::uint64_t seq_id = 0;
    std::uint64_t serial = 0;  // SeqStep::table_serial
    std::uint64_t base = 0;    // SeqStep::table_base
    bool decode = false;       // runs through the decode kernel (its row is its batch index)
  };
  // Ops and page ids a step can need at most (every sequence rewritten whole).
  static std::size_t max_ops(int rows, int layers);
  static std::size_t max_data(int rows, int layers, int pmax);
  // Page ids of one delta round by default (StepLimits::table_delta_entries 0): the whole
  // store, at most 1 Mi (4 MiB of device buffer; a step needing more runs several rounds).
  static int delta_entries(int rows, int layers, int pmax);

  // Throws ConfigError when the store has more entries than an int32 indexes.
  TableStore(int rows, int layers, int pmax);

  // Starts a step: places every sequence (plan order) on a row, writing ops and page ids into
  // the caller's spans (sized max_ops / max_data). Forgets an earlier step that was not
  // committed. At most `rows` sequences.
  void begin(std::span<const SeqKey> seqs, std::span<TableOp> ops, std::span<std::int32_t> data);
  int row_of(int i) const { return row_of_[static_cast<std::size_t>(i)]; }
  // Sequence i's table of `layer` this step: `pages` (the first pmax are stored), `own` when
  // they are the sequence's LayerSlots::pages (false: temp or scratch pages, never kept across
  // steps), `kept` its LayerSlots::pages_kept. Once per (sequence, layer) per step.
  void stage(int i, int layer, std::span<const std::int32_t> pages, bool own, int kept);
  int num_ops() const { return nops_; }
  int num_data() const { return ndata_; }
  // Host -> device bytes of the step's ops and page ids.
  std::int64_t bytes() const {
    return static_cast<std::int64_t>(nops_) * static_cast<std::int64_t>(sizeof(TableOp)) +
           static_cast<std::int64_t>(ndata_) * 4;
  }
  // The step's ops in slices of at most `data_cap` page ids (>= pmax).
  std::vector<TableRound> rounds(int data_cap) const;
  // The step's ops will run: what they write becomes what the store holds.
  void commit();
  // The device may not hold what the mirror says (tables written another way, or a step that
  // failed after its plan): nothing is trusted, every row is cleared whole when next written.
  void forget();

  // The mirror (tests): the sequence on a row (0 with `held` false: none).
  int rows() const { return rows_n_; }
  int layers() const { return layers_; }
  int pmax() const { return pmax_; }
  bool held(int row) const { return rows_[static_cast<std::size_t>(row)].held; }
  std::uint64_t seq_on(int row) const { return rows_[static_cast<std::size_t>(row)].seq_id; }

 private:
  struct Row {
    bool held = false;            // a sequence resides here
    std::uint64_t seq_id = 0;     // (held)
    std::uint64_t serial = 0;     // export whose own pages the `own` layers hold (0: none)
    std::uint64_t used = 0;       // step counter of its last use (least recently used goes first)
    std::vector<std::int32_t> n;  // [layers] entries that may be non-zero (past them: zeros)
    std::vector<char> own;        // [layers] the entries are the sequence's pages of `serial`
  };
  void emit(std::int32_t dst, std::int32_t count, std::int32_t kind, std::int32_t arg);
  bool trusted(const Row& r, const SeqKey& k) const {
    return r.held && r.seq_id == k.seq_id && r.serial != 0 && r.serial == k.base;
  }

  int rows_n_, layers_, pmax_;
  std::vector<Row> rows_;                         // committed: what the device holds
  std::vector<Row> next_;                         // this step's state, rows_ after commit()
  std::unordered_map<std::uint64_t, int> where_;  // held rows of rows_ by sequence
  std::uint64_t clock_ = 0;
  // This step.
  std::vector<int> row_of_;  // plan index -> row
  std::vector<int> src_of_;  // plan index -> the row its kept entries come from (-1: none)
  std::vector<int> taker_;   // row -> plan index (-1)
  std::vector<char> source_;
  std::span<TableOp> ops_;
  std::span<std::int32_t> data_;
  int nops_ = 0, ndata_ = 0;
  bool open_ = false;
};

}  // namespace strata::cuda
