// The plan half of a CUDA step (docs/cuda-backend.md "Plan and run"; FlashInfer's DecodePlan is
// the model): from a StepPlan and the backend's start-up limits, everything the device run
// needs that the host can work out alone — validation, row order, the flat tables of the upload
// image, decode metadata, named workspace offsets of the eager sparse work, lm_head row chunks,
// the CUDA-graph bucket and the sampling route of every row. The run (cuda/backend/run.cpp)
// only uploads, launches or replays, and samples.
//
// Plain C++ with no CUDA header and no CUDA call: it runs and is unit-tested on machines
// without a GPU (tests/cuda/step_layout_test.cpp).
//
// Room for the step loop (issue 24): the metadata the device buffers receive lives in one
// contiguous host image (StepImage) whose sections have fixed offsets computed from the limits,
// so two images can alternate (double-buffered metadata). With StepOptions::device_tables the
// page tables stay on the device and the tables section carries only a delta (cuda/table_store.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/sparse/sparse_meta.h"
#include "cuda/sparse/sparse_plan.h"
#include "cuda/table_store.h"
#include "runtime/step_plan.h"
#include "runtime/step_plan_check.h"

namespace strata::cuda {

// What the backend fixed at start-up; device buffers are sized from these.
struct StepLimits {
  int num_layers = 0;
  int vocab = 0;
  int num_pages = 0;        // pages the cache manager hands out (BackendInfo::num_pages)
  int scratch_pages = 0;    // prefill scratch: pool pages [num_pages, num_pages + scratch_pages)
  int max_seqs = 0;         // sequences per step (scheduler.max_num_seqs)
  int max_tokens = 0;       // input tokens per step (>= max_seqs)
  int max_table_pages = 0;  // pages of one (sequence, layer) table: ceil(max_model_len / 16)
  int max_tiles = 0;        // prefill tiles of 64 queries per step
  int logit_rows = 0;       // lm_head rows per chunk (rows of the logits buffer)
  int kv_heads = 0;         // local KV heads (this rank)
  int head_dim = 0;
  int num_sms = 1;                 // multiprocessors of the device (decode split count)
  std::vector<int> graph_buckets;  // batch sizes with CUDA graphs, ascending, <= max_seqs
  // Page ids one delta upload of the resident tables carries (the device buffer; >=
  // max_table_pages); 0: TableStore::delta_entries.
  int table_delta_entries = 0;
};

// Switches that may change between steps (configuration and test hooks).
struct StepOptions {
  bool graphs = true;         // backend.cuda_graphs (off with host-staged collectives)
  bool sparse_graphs = true;  // backend.sparse_graphs: graphs for decode touching sparse layers
  int forced_splits = 0;      // decode attention splits (0: pick_decode_splits)
  // backend.device_tables: page tables resident on the device, updated by deltas (off: every
  // step uploads whole tables in plan order, the path before issue 24).
  bool device_tables = false;
};

// Decode attention split count: enough blocks for ~2 per SM (the tensor-core kernel's residency:
// 104 KB of shared memory per block), at least 256 keys per split, 1..kMaxDecodeSplits
// (cuda/attention.h; 64). One split skips the merge kernel.
int pick_decode_splits(int batch, int max_len, int kv_heads, int num_sms);

// Byte offsets of the named sections of one upload image (every section at a fixed offset,
// 256-byte aligned, sized for the limits). Sections are int32 unless noted.
struct StepImageLayout {
  std::size_t tokens = 0;     // [max_tokens] input token of each row
  std::size_t pos = 0;        // [max_tokens] position of each row
  std::size_t seq_of = 0;     // [max_tokens] order index of the row's sequence, -1: padding
  std::size_t lm_rows = 0;    // [max_tokens] rows whose logits are computed, in lm-row order
  std::size_t q_row = 0;      // [max_seqs] decode batch index -> row
  std::size_t row_start = 0;  // [max_seqs] by order index: first row (prefill sequences)
  std::size_t nq = 0;         // [max_seqs] by order index: query rows (prefill sequences)
  std::size_t qpos0 = 0;      // [max_seqs] by order index: first position (prefill sequences)
  std::size_t tile_seq = 0;   // [max_tiles] order index of each 64-query prefill tile
  std::size_t tile_q0 = 0;    // [max_tiles] first query of the tile within its sequence
  std::size_t seq_len = 0;    // [layers][max_seqs] slots decode attention attends
  std::size_t slots = 0;      // [layers][max_seqs] slot the decode token's K/V goes to
  std::size_t dec_seqs = 0;   // [layers][max_seqs] sparse::DecodeSeq (policy 0: full/padding)
  // Whole tables: [order index][layer][table_pages] page ids (pitch of the step). Device
  // tables: the delta's page ids, read by the table ops.
  std::size_t tables = 0;
  std::size_t table_ops = 0;  // [TableStore::max_ops] TableOp (device tables)
  std::size_t bytes = 0;      // whole image
  static StepImageLayout for_limits(const StepLimits& lim);
};

// Typed view of one image over memory the caller owns (pinned in the backend, a vector in
// tests); mem must hold layout.bytes bytes, 16-byte aligned.
class StepImage {
 public:
  StepImage() = default;
  StepImage(std::span<std::byte> mem, const StepImageLayout& layout);
  const StepImageLayout& layout() const { return at_; }
  std::byte* data() const { return base_; }
  std::int32_t* tokens() const { return i32(at_.tokens); }
  std::int32_t* pos() const { return i32(at_.pos); }
  std::int32_t* seq_of() const { return i32(at_.seq_of); }
  std::int32_t* lm_rows() const { return i32(at_.lm_rows); }
  std::int32_t* q_row() const { return i32(at_.q_row); }
  std::int32_t* row_start() const { return i32(at_.row_start); }
  std::int32_t* nq() const { return i32(at_.nq); }
  std::int32_t* qpos0() const { return i32(at_.qpos0); }
  std::int32_t* tile_seq() const { return i32(at_.tile_seq); }
  std::int32_t* tile_q0() const { return i32(at_.tile_q0); }
  std::int32_t* seq_len() const { return i32(at_.seq_len); }
  std::int32_t* slots() const { return i32(at_.slots); }
  sparse::DecodeSeq* dec_seqs() const {
    return reinterpret_cast<sparse::DecodeSeq*>(base_ + at_.dec_seqs);
  }
  std::int32_t* tables() const { return i32(at_.tables); }
  TableOp* table_ops() const { return reinterpret_cast<TableOp*>(base_ + at_.table_ops); }

 private:
  std::int32_t* i32(std::size_t off) const { return reinterpret_cast<std::int32_t*>(base_ + off); }
  std::byte* base_ = nullptr;
  StepImageLayout at_;
};

// Where a row's token comes from.
enum class SampleRoute : std::uint8_t {
  kNone,           // not sampled
  kDeviceArgmax,   // greedy without penalties, logit_bias, logprobs or active min_tokens ban
  kDeviceSampler,  // cuda/sampling.h: everything else the device sampler covers
  kHost,           // runtime/sampler.h on a host copy (logprobs > 20, vocabulary > 2^19)
};

// The lm rows of one sequence: [first, first + count) of the lm-row list (graph steps: its
// batch row, count 1). first == -1: no logits.
struct LmSlot {
  int first = -1;
  int count = 0;
};

// One pass of the final norm + lm_head over up to logit_rows lm rows.
struct LmChunk {
  int base = 0;  // first lm row of the chunk
  int rows = 0;
  std::vector<int> host_rows;       // chunk rows copied to the host (return_logits, kHost)
  std::vector<int> device_sampled;  // plan indices sampled by the device sampler here
};

// Eager sparse work of one layer: byte offsets into the sparse workspace (metadata part) and
// the kernels' host-planned sizes (cuda/sparse/sparse_kernels.h PrefillParams/ShrinkParams).
struct SparseLayerWork {
  std::size_t prefill_seqs = 0;  // sparse::PrefillSeq[prefill_num_seqs]
  std::size_t src_pages = 0;     // int32 concatenated source tables
  std::size_t dst_pages = 0;     // int32 concatenated destination tables
  std::size_t shrink_seqs = 0;   // sparse::ShrinkSeq[shrink_num_seqs]
  std::size_t shrink_pages = 0;  // int32 concatenated tables of the shrunk sequences
  int prefill_num_seqs = 0;      // 0: no sparse prefill in this layer
  int prefill_max_len = 0;
  int prefill_max_kept = 0;
  int shrink_num_seqs = 0;  // 0: no shrink in this layer
};

// Kernel scratch after the metadata (shared by the layers: they run one after another).
struct SparseScratch {
  std::size_t raw = 0;          // float [score_floats]
  std::size_t pooled = 0;       // float [score_floats]
  std::size_t kept_idx = 0;     // int32 [kept_elems]
  std::size_t kept_score = 0;   // float [kept_elems]
  std::size_t stage_idx = 0;    // int32 [stage_slots]
  std::size_t stage_kv = 0;     // bf16 [stage_slots][2][head_dim]
  std::size_t stage_score = 0;  // float [stage_slots]
  std::size_t stage_pos = 0;    // int32 [stage_slots]
  std::size_t bytes = 0;        // whole workspace (metadata + scratch)
};

struct SparseWorkLayout {
  bool any = false;                     // eager sparse prefill or shrink work in this step
  std::vector<unsigned char> meta;      // host image of the workspace's metadata part (offset 0)
  std::vector<SparseLayerWork> layers;  // [num_layers] when any
  SparseScratch scratch;
};

// A replayed CUDA graph: every host value the capture bakes in (with the layer-tap flag,
// which the run adds). bucket == 0: the step runs eagerly.
struct GraphChoice {
  int bucket = 0;       // padded batch size
  int slot_bucket = 0;  // power-of-two bound >= 64 on sparse decode slots; 0 without sparse
  int splits = 0;       // decode attention splits
};

struct StepLayout {
  // Sizes of the plan.
  int num_seqs = 0;
  int rows = 0;                 // input tokens (T)
  int decode_rows = 0;          // decode-kernel rows, first in the row order
  int tiles = 0;                // prefill tiles
  int table_pages = 1;          // pitch of the tables section: the longest table a row needs
  int lm_rows = 0;              // rows of the lm-row list
  int max_len = 0;              // longest decode sequence (position + 1)
  int dec_max_slots = 0;        // most slots a sparse decode row attends
  bool sparse_decode = false;   // decode rows touch a sparse layer
  bool sparse_prefill = false;  // eager sparse prefill work (select or direct scoring)
  bool shrink = false;          // a kShrink in the step
  // Row order: decode-kernel rows (single tokens: decodes and one-token prefill chunks whose
  // sparse layers all hold the prompt directly) in plan order, then prefill chunks.
  std::vector<int> order;  // order index -> plan index
  // Order index -> row of the device page tables: the sequence index seq_of, tile_seq, row_start,
  // nq, qpos0 and the tables use (the order index itself without device tables; decode rows:
  // always their batch index).
  std::vector<int> table_row;
  int table_rows = 0;            // rows [0, table_rows) of row_start / nq / qpos0 uploaded
  std::vector<int> first_row;    // plan index -> its first row
  std::vector<char> decode_row;  // plan index -> 1: runs through the decode kernel
  // Launch.
  int eager_splits = 1;
  GraphChoice graph;
  int run_rows = 0, run_decode_rows = 0, run_lm_rows = 0;  // = the bucket when replaying
  // Logits and sampling.
  std::vector<LmSlot> lm;          // plan index -> its lm rows
  std::vector<SampleRoute> route;  // plan index -> how its token is drawn
  std::vector<LmChunk> chunks;
  SparseWorkLayout sparse;
  // Page tables. Device tables: the image's table_ops section holds table_ops ops over
  // table_data page ids in its tables section, uploaded and applied round by round before the
  // layers run; else the tables section holds whole tables (num_seqs x layers x table_pages).
  bool table_deltas = false;
  int table_ops = 0, table_data = 0;
  std::vector<TableRound> table_rounds;
  std::int64_t table_bytes = 0;  // host -> device bytes of page tables this step
};

// Builds layouts for one backend; keeps per-backend scratch between steps (page marks).
class StepPlanner {
 public:
  explicit StepPlanner(StepLimits limits);
  const StepLimits& limits() const { return lim_; }
  // Validates `plan` (runtime/step_plan_check.h: InvalidRequest("prompt") for a token outside
  // the vocabulary or a sequence past max_model_len, InternalError for engine bugs; plus
  // InternalError when the prefill scratch is exhausted or a decode kernel would read a slot
  // the step does not hold) and fills `out` and `image` (whose layout must be
  // StepImageLayout::for_limits(limits())).
  void build(const StepPlan& plan, const StepOptions& opt, const StepImage& image, StepLayout& out);
  // The device tables may not hold what the planner's mirror says (a step failed after build,
  // or ran without device tables): the next steps with device tables rewrite whole rows.
  void forget_tables() { store_.forget(); }
  const TableStore& table_store() const { return store_; }  // (tests)

 private:
  void order_rows(const StepPlan& plan, StepLayout& out) const;
  void measure(const StepPlan& plan, StepLayout& out) const;
  void place_table_rows(const StepPlan& plan, const StepImage& image, StepLayout& out);
  void stage_rows(const StepPlan& plan, const StepImage& image, StepLayout& out,
                  std::vector<std::vector<sparse::PrefillInput>>& pre);
  void stage_decode_row(const SeqStep& s, int k, int row, const StepImage& image,
                        StepLayout& out) const;
  void collect_lm_rows(const StepPlan& plan, const StepImage& image, StepLayout& out) const;
  void choose_launch(const StepOptions& opt, const StepImage& image, StepLayout& out) const;
  void plan_sparse_work(const StepPlan& plan,
                        const std::vector<std::vector<sparse::PrefillInput>>& pre,
                        StepLayout& out) const;
  void plan_logits(const StepPlan& plan, StepLayout& out) const;

  StepLimits lim_;
  StepPlanChecker checker_;   // the StepPlan contract (runtime/step_plan_check.h)
  TableStore store_;          // what the device tables hold (device_tables)
  bool store_synced_ = true;  // no step since the last forget wrote whole tables
  std::vector<TableStore::SeqKey> keys_;
};

}  // namespace strata::cuda
