// The layer-wise KV cache manager (DESIGN.md section 3, docs/sparsity.md): page tables per
// sequence and per layer, the sparsity policies' page arithmetic, admission with exact
// reservations, growth, preemption by recompute, versioned profiles with live shrinking,
// and accounting.
//
// Threading: not thread-safe; owned by one strand (the batcher's / cache actor's).
//
// One step, seen from the batcher:
//   1. for every sequence of the step: prepare_chunk() (prefill) or prepare_decode() fills
//      SeqStep::layers. Pages for the slots the step writes are allocated here. false means
//      "no pages now" and changes nothing (no partial allocation): preempt someone
//      (preempt()) and retry, or leave the sequence out of this step.
//   2. put take_released() into StepPlan::released_pages, run the step on every rank;
//   3. commit_step() for every sequence that ran: the manager advances its own copy of each
//      LayerSlots with the state rule the backends use (advance_layer(),
//      runtime/step_plan_check.h: after kSelect valid = C_l, ring_pos = 0), then frees the
//      temp pages after kSelect and the pages past pages_for_slots(shrink_to) after kShrink.
//   A sequence prepared but not run may be prepared again (the last preparation counts;
//   pages it allocated stay in its tables and are used by the next step) or freed.
//
// Reservation (what is promised when). admit() allocates nothing; it reserves pages, which
// the sequence's later allocations draw from and which no other sequence can take:
//   - full layer:           the prompt's pages, pages_for_slots(prompt_len). Decode growth
//                           (a page per 16 tokens) is NOT reserved: it is taken from the
//                           unreserved free pages in prepare_decode(), which can fail ->
//                           the batcher preempts (recompute).
//   - window / scored:      pages_for_slots(min(prompt_len + max_tokens - 1, C_l)): all the
//                           layer will ever hold (fixed capacity).
//   - snapkv:               pages_for_slots(min(prompt_len, C_l) + max_tokens - 1): the
//                           selected prompt plus every generated token (appended).
//   - sparse, prompt_len > C_l, chunked: + pages_for_slots(prompt_len) temporary pages that
//                           hold the prompt until the chunk ending it selects (kSelect);
//                           freed after that step.
// So an admitted sequence's prefill never runs out of pages, and only full-layer decode
// growth (or decoding past max_tokens) can. Reservations shrink as pages are allocated or
// no longer needed (temp pages after selection, live shrinks); they never grow.
//
// Prefix cache (PrefixCacheOptions; docs/sparsity.md "Prefix cache"). A spec with block_hashes
// is cacheable when every sparse layer of its rules selects (prompt_len > C_l: a layer whose
// prompt fits keeps EMA scores over every prompt row in its own pages, which no other request
// could reuse). A cacheable sequence's selecting layers always hold the prompt in temp pages
// (also for a whole prompt in one step), so every layer of every full prompt block is a pool
// page with the block's dense K/V; each block is inserted into the cache when the chunk
// completing it commits (the cache takes one reference per page). Admission looks the leading
// blocks up: a hit of h blocks (stopping at or before prompt_len - min_final_chunk, the
// observation window) puts the cached pages at the head of the tables (full layers: pages,
// selecting layers: temp_pages), starts the sequence at h * 16 computed tokens and reserves
// only the rest.
// Evictable pages. A cached block's page that only the block table references (pool ref
// count 1) is free memory on demand: every page of an unused block, and, once its users' sparse
// layers have selected (kSelect drops their temp pages), the sparse-layer pages of a block in
// use, whose full-layer pages the users keep. The manager follows each cached page's ref count
// (page_block_: page -> cached block; release_page(), the retains of a hit and of an insert) so
// the count per block and in all (PrefixCache::pages_evictable()) is kept in O(1) per page
// operation. Those pages count as available (pages_available(), admission, growth); a hit is
// charged the table-only pages it makes shared again (all of an unused block, the sparse pages
// of a selected-from block in use). When an allocation finds no free page, unused blocks are
// evicted LRU first, then blocks in use holding table-only pages (the longest holding first):
// such a block leaves the index (no later hit), the table drops its references (its table-only
// pages are freed, the users' pages stay theirs) and it stays a husk until its users free it.
// So a running sparse sequence pins no more memory than with the cache off. The cache's budget
// (max_pages) evicts unused blocks only.
// Invariant: pool free pages + evictable cached pages >= outstanding reservations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"
#include "cache/kv_planner.h"
#include "cache/layer_census.h"
#include "cache/page_pool.h"
#include "cache/prefix_cache.h"
#include "runtime/kv_layout.h"
#include "runtime/sparsity_profile.h"
#include "runtime/step_plan.h"

namespace strata {

// What the batcher asks to admit. After a preemption, prompt_len is prompt + output so far
// and max_tokens the tokens still to generate.
struct SeqSpec {
  int prompt_len = 0;  // >= 1
  int max_tokens = 1;  // >= 0; decode writes = max_tokens - 1
  // The prompt may be split over several steps. false: the batcher promises the whole
  // prompt in one prepare_chunk() (no temporary pages are reserved; a smaller chunk throws).
  bool chunked = true;
  // Per-request override (kv_sparsity); nullopt: the current profile version.
  std::optional<SparsityProfile> sparsity;
  // Names of the prompt's full blocks (block_hashes(), chained from the model's and the
  // request's root); null or empty: the sequence neither hits nor fills the prefix cache.
  std::shared_ptr<const std::vector<BlockHash>> block_hashes;
};

// The prefix cache of a manager. max_pages < 0: the cache may hold the whole pool (it only
// ever holds pages nothing else wants: unused blocks are evicted when pages are needed).
struct PrefixCacheOptions {
  bool enabled = false;
  int max_pages = -1;
};

struct AdmitResult {
  bool ok = false;          // can be admitted now
  bool never_fits = false;  // needs more pages than the whole pool: reject the request
  int need_pages = 0;       // reservation admission takes (PagePlan::admission)
  int available_pages = 0;  // free (and evictable cached) pages not reserved by others
  int cached_tokens = 0;    // prompt tokens admission would take from the prefix cache
};

// Per-sequence accounting.
struct SeqUsage {
  int tokens = 0;  // KV positions computed (prompt chunks done + decode steps)
  int pages = 0;   // pages held, temp pages included
  int temp_pages = 0;
  int reserved_pages = 0;  // reservation not yet drawn
  long slots_held = 0;     // sum over layers of valid slots (+ prompt slots in temp pages)
  long full_slots = 0;     // layers x tokens: what a full cache would hold
  // full-cache KV bytes of its tokens / KV bytes of the slots it holds (slot based);
  // 1.0 before any token is computed.
  double compression = 1.0;
  // full-cache pages (layers x pages_for_slots(tokens)) / pages held (page based).
  double page_compression = 1.0;
  int cached_tokens = 0;  // prompt tokens taken from the prefix cache at admission
};

struct CacheStats {
  int pages_total = 0, pages_used = 0, pages_free = 0, pages_reserved = 0;
  std::size_t page_bytes = 0, bytes_used = 0, bytes_total = 0;
  std::vector<int> pages_per_layer;  // pages held per layer (temp pages counted in their layer)
  int sequences = 0;
  long slots_held = 0, full_slots = 0;  // summed over sequences
  double compression = 1.0;             // global, slot based: full_slots / slots_held
  double page_compression = 1.0;        // global, page based
  std::uint64_t profile_version = 0;
  // Prefix cache: pages the cache references (shared with sequences or not), of which only
  // the cache references (evictable: free memory on demand; pages_used - pages_evictable = the
  // pages sequences hold), blocks cached; prompt tokens looked up at admission and found
  // (vLLM's prefix_cache_queries / prefix_cache_hits), blocks evicted (of which in use: their
  // table-only pages freed, the rest left to their users), evicted blocks still in use (husks).
  bool prefix_cache = false;
  int pages_cached = 0, pages_evictable = 0, blocks_cached = 0, husks = 0;
  std::uint64_t prefix_queries = 0, prefix_hits = 0, blocks_evicted = 0, blocks_evicted_in_use = 0;
};

class KvCacheManager {
 public:
  // `profile` is version 1 unless it carries a non-zero version. Throws ConfigError when
  // the profile is invalid for `num_layers`.
  KvCacheManager(int num_layers, KvLayout layout, int num_pages, const SparsityProfile& profile,
                 PrefixCacheOptions prefix_cache = {});

  // ---- profiles ---------------------------------------------------------------------------
  // Validates (resolve() for this depth; a bad profile throws ConfigError naming the field and
  // changes nothing), publishes it as the next version and returns that version. Sequences
  // admitted afterwards use it. With `shrink_running`, running sequences on the previous
  // profile (not those with a per-request override) whose sparse layers get a smaller C_l
  // (same policy) are shrunk at their next decode step (LayerAction::kShrink when they hold
  // more than the new C_l; otherwise the rule is just switched). Sequences still in prefill
  // shrink at their first decode step.
  std::uint64_t set_profile(const SparsityProfile& profile, bool shrink_running = false);
  const SparsityProfile& profile() const { return profile_; }
  std::uint64_t profile_version() const { return profile_.version; }
  const std::vector<LayerRule>& rules() const { return rules_; }
  // Rules a request would get (override or the current profile). Throws ConfigError.
  std::vector<LayerRule> rules_for(const std::optional<SparsityProfile>& sparsity) const;

  // ---- admission and lifetime -------------------------------------------------------------
  // Throws ConfigError (bad override) or InvalidRequest (prompt_len < 1, max_tokens < 0).
  AdmitResult can_admit(const SeqSpec& spec) const;
  // Reserves (see above) and registers the sequence; false when can_admit() is not ok.
  // InternalError when seq_id is already admitted.
  bool admit(std::uint64_t seq_id, const SeqSpec& spec);
  // Finish or abort: every page and reservation of the sequence is returned.
  // Unknown ids are ignored (returns false). `names`: the names of the full blocks of the
  // sequence's prompt + generated tokens (block_hashes() over them); when every layer of a
  // cacheable sequence is full (sparsity off), its computed blocks past the prompt are cached
  // first, as vLLM does (a follow-up turn then hits the answer too). With a sparse layer nothing
  // generated is cached: the layers above it saw sparse attention's hidden states.
  bool free(std::uint64_t seq_id, const std::vector<BlockHash>* names = nullptr);
  // Preemption by recompute: same as free(); the batcher re-queues prompt + output and later
  // admits it again with the longer prompt.
  bool preempt(std::uint64_t seq_id) { return free(seq_id); }
  bool contains(std::uint64_t seq_id) const { return seqs_.count(seq_id) != 0; }

  // ---- chunked prefill --------------------------------------------------------------------
  // The chunk that ends the prompt must contain the last α positions of every sparse layer
  // that selects (prompt_len > C_l): its length is at least min_final_chunk() (1 when no
  // layer selects; the whole prompt when the spec is not chunked).
  int min_final_chunk(std::uint64_t seq_id) const;
  // The longest legal chunk of at most `budget` tokens starting at the next prompt position:
  // the rest of the prompt when it fits, else at most the prefix that leaves the final
  // chunk its last α positions. 0 when no legal chunk fits the budget (or prefill is done).
  int next_chunk_len(std::uint64_t seq_id, int budget) const;
  // Fills `layers` (one LayerSlots per model layer, state before the step) for the prompt
  // tokens [start, start + n_tokens), start = tokens computed so far. Allocates the pages the
  // chunk writes (full / direct layers: pages covering start + n_tokens slots; selecting
  // layers: temp pages covering start + n_tokens when the prompt is split, and on the final
  // chunk the pages_for_slots(C_l) the selection gathers into, with action kSelect).
  // Returns false (nothing allocated) when pages are missing. InternalError for an illegal
  // chunk (past the prompt, a final chunk shorter than min_final_chunk(), not the whole
  // prompt of an unchunked spec) or an unknown sequence.
  bool prepare_chunk(std::uint64_t seq_id, int n_tokens, std::vector<LayerSlots>* layers);
  // One decode token at position tokens(seq_id): allocates a page where decode_slot() starts
  // a new one; sets kShrink where a live shrink is pending. false (nothing allocated) when
  // pages are missing. InternalError when the prompt is not complete.
  bool prepare_decode(std::uint64_t seq_id, std::vector<LayerSlots>* layers);
  // The same into a recycled buffer, exported incrementally. `*serial` says which export
  // `*layers` holds: the value a prepare_*() call with a serial left there (the buffer
  // unchanged since, whichever sequence it was for), or 0 (unknown). When it is this
  // sequence's last export with a serial, only what changed since is written (the tables'
  // scalars, the table entries past the prefix unchanged since, the temp pages); otherwise
  // everything. On success `*serial` names the new export (serials are never reused: a
  // buffer of a freed or preempted sequence never matches again); on failure nothing
  // changes. Either way `*layers` ends up equal to what the two-argument form writes
  // (which is this form with a null `serial`: a full copy). Each LayerSlots::pages_kept says
  // how many leading entries of its pages equal those of the sequence's previous export with a
  // serial (export_serial() before the call; 0 when there was none).
  bool prepare_chunk(std::uint64_t seq_id, int n_tokens, std::vector<LayerSlots>* layers,
                     std::uint64_t* serial);
  bool prepare_decode(std::uint64_t seq_id, std::vector<LayerSlots>* layers, std::uint64_t* serial);
  // The prepared step ran: advance the tables. InternalError when nothing was prepared.
  void commit_step(std::uint64_t seq_id);
  // Pages freed since the last call and still free (for StepPlan::released_pages), sorted.
  // Call it after the step's prepare_*() calls: a page freed by a preemption and handed to
  // another sequence in the same plan is not listed (its new owner overwrites it).
  std::vector<std::int32_t> take_released();

  // ---- accounting -------------------------------------------------------------------------
  // The sequence's last export with a serial (0: none): SeqStep::table_base of its next step.
  std::uint64_t export_serial(std::uint64_t seq_id) const;
  int tokens(std::uint64_t seq_id) const;      // positions computed
  int prompt_len(std::uint64_t seq_id) const;  // of the spec it was admitted with
  bool prefill_done(std::uint64_t seq_id) const;
  std::uint64_t seq_profile_version(std::uint64_t seq_id) const;  // 0: per-request override
  // A copy of the manager's layer states of a sequence (before its next step).
  std::vector<LayerSlots> layers(std::uint64_t seq_id) const;
  SeqUsage usage(std::uint64_t seq_id) const;
  CacheStats stats() const;
  // Keeps a sequence's census of kept positions (SeqResult::kept of a step that ran, one per
  // layer) until the next one or its free; an empty census is ignored, as is an unknown id (a
  // sequence freed meanwhile). InternalError when the layer count differs.
  void record_kept(std::uint64_t seq_id, std::vector<KeptPositions> kept);
  // One LayerUsage per layer (cache/layer_census.h). Sorts per layer: call it at the console's
  // rate, not every step.
  std::vector<LayerUsage> layer_census() const;
  int num_layers() const { return num_layers_; }
  const PagePool& pool() const { return pool_; }
  int pages_reserved() const { return reserved_total_; }
  // Pages a new sequence or growth can take: free and evictable (table-only) cached pages not
  // reserved.
  int pages_available() const { return pool_.free() + prefix_.pages_evictable() - reserved_total_; }
  bool prefix_cache_enabled() const { return prefix_opts_.enabled; }
  const PrefixCache& prefix_cache() const { return prefix_; }
  int cached_tokens(std::uint64_t seq_id) const;  // taken from the cache at admission
  // Evicts every unused cached block (tests: a quiet pool then holds no page).
  void drop_unused_cache();

  // Recount everything (tests, debug builds): every used page owned exactly once by one
  // table of one sequence, no free page owned, per-layer/used/reserved counts equal to a
  // recount, tables covering their valid slots. Throws InternalError naming what differs.
  void check_invariants() const;

  // Work of the exports into prepare_*() buffers since construction (tests, benchmarks).
  struct ExportCounters {
    long exports = 0;         // prepare_*() exports with a serial
    long incremental = 0;     // of which into the buffer of the sequence's last export
    long pages_exported = 0;  // table entries (pages + temp pages) the exports hold
    long pages_copied = 0;    // of which written
  };
  const ExportCounters& export_counters() const { return export_counters_; }

 private:
  struct Layer {
    LayerSlots slots;      // the manager's copy (pages, temp_pages, valid, ring_pos, rule)
    int ceiling = 0;       // pages of `slots.pages` promised by the reservation
    int temp_ceiling = 0;  // temp pages promised by the reservation
    std::optional<LayerRule> shrink_to;  // live shrink requested, not yet planned
    std::optional<LayerRule> shrinking;  // kShrink planned in the prepared step
    // Leading entries of slots.pages unchanged since the sequence's last export with a
    // serial (Seq::export_serial): tables grow at the back; only a shrink lowers this.
    std::size_t synced = 0;
  };
  struct Pending {
    bool active = false;
    bool decode = false;
    int n_tokens = 0;
  };
  struct Seq {
    SeqSpec spec;               // sparsity cleared after resolving
    std::uint64_t version = 0;  // profile version, 0 = per-request override
    int tokens = 0;             // positions computed
    int decodes = 0;            // decode steps committed
    std::vector<Layer> layers;
    Pending pending;
    std::uint64_t export_serial = 0;  // last export with a serial (0: none)
    std::vector<KeptPositions> kept;  // the last census of kept positions (record_kept)
    // Prefix cache: the tokens admission took from the cache (the prefill starts there), the
    // blocks this sequence uses (hit or inserted by it; released at free), the leading
    // prompt blocks already cached (the next insert starts there), whether it may insert.
    int first = 0;
    bool cacheable = false;
    std::vector<int> blocks;
    int cached_blocks = 0;
  };
  struct Held {
    long pages = 0, temp = 0, slots = 0, full_slots = 0, full_pages = 0;
  };

  Seq& get(std::uint64_t seq_id, const char* what);
  const Seq& get(std::uint64_t seq_id, const char* what) const;
  static int outstanding(const Layer& l);
  static int outstanding(const Seq& s);
  static bool selects(const Seq& s, const Layer& l);
  static int remaining_writes(const Seq& s);
  static int target_pages(const Seq& s, const Layer& l);
  static void lower_ceiling(Layer& l, int target_pages, int old_outstanding);
  static void export_layers(const Seq& s, std::vector<LayerSlots>* out);
  // export_layers() into a buffer holding export `*serial` (nullptr: untracked, a full copy
  // that leaves the tracking alone).
  void export_tracked(Seq& s, std::vector<LayerSlots>* out, std::uint64_t* serial);
  // All-or-nothing growth of the tables to the wanted page counts (per layer).
  bool grow(Seq& s, const std::vector<int>& want_pages, const std::vector<int>& want_temp);
  void release_page(int layer, std::int32_t id);
  Held held(const Seq& s) const;
  // Prefix cache helpers.
  bool cacheable(const SeqSpec& spec, const std::vector<LayerRule>& rules) const;
  // Blocks a cacheable spec would hit (their ids into *ids).
  int hit_blocks(const SeqSpec& spec, const std::vector<LayerRule>& rules,
                 std::vector<int>* ids) const;
  // A free page; when none is, evicts an unused cached block, else a block in use holding
  // table-only pages, until one is.
  std::int32_t alloc_page();
  bool evict_unused();  // one LRU block's pages back to the pool
  bool evict_in_use();  // one in-use block's table-only pages back; it becomes a husk
  void drop_table_refs(const std::vector<std::int32_t>& pages);  // of an evicted block
  // What a hit of the first `hit` of `ids` adds to a reservation: its table-only pages (they
  // stop being evictable) minus the pages it brings (one per layer per block).
  int hit_charge(const std::vector<int>& ids, int hit) const;
  // The blocks [cached_blocks, end / 16) named by `names` (default: the prompt's).
  void insert_blocks(Seq& s, int end, const std::vector<BlockHash>* names = nullptr);

  int num_layers_;
  PagePool pool_;
  SparsityProfile profile_;
  std::vector<LayerRule> rules_;
  std::unordered_map<std::uint64_t, Seq> seqs_;
  int reserved_total_ = 0;                   // outstanding reservations of all sequences
  std::vector<int> layer_pages_;             // pages held per layer (temp included)
  std::vector<std::int32_t> released_;       // freed since take_released()
  std::uint64_t last_serial_ = 0;            // export serials handed out
  std::vector<int> want_pages_, want_temp_;  // prepare_*() scratch (no per-call allocation)
  ExportCounters export_counters_;
  PrefixCacheOptions prefix_opts_;
  PrefixCache prefix_;
  std::uint64_t prefix_queries_ = 0, prefix_hits_ = 0, blocks_evicted_ = 0;
  std::uint64_t blocks_evicted_in_use_ = 0;
  std::vector<int> hit_ids_;  // hit_blocks() scratch
  std::vector<std::int32_t> evict_scratch_;
  // Cache on: page -> the cached block referencing it (-1: none), [num_pages].
  std::vector<int> page_block_;
};

}  // namespace strata
