// Prefill attention for Hopper (sm_90a only; built as its own object library, see
// cuda/CMakeLists.txt): FlashAttention-3 style warp specialization. Same interface, masking
// and LSE contract as the FA2 kernel (cuda/attention.h); design notes in docs/cuda-backend.md.
//
// Work item = one 64-query tile of the interface's tile list x NC query heads of one KV group
// (NC = 2 when the GQA group size is even, else 1); a block runs one item (v1, v5) or a list of
// them (v6), with NC consumer warpgroups and a producer (v1's shown; v5, v6 below):
//   warps 0 .. 4NC-1: NC consumer warpgroups; warpgroup w owns query head h0 + w, 64 rows.
//     S = Q K^T by wgmma m64n128k16 (Q and K from shared memory by descriptor), the online
//     softmax in registers (log2 domain, as the FA2 kernel), O += P V by wgmma m64nHDk16 with P
//     in registers as the A operand and V from shared memory (MN-major, imm-trans-b = 1).
//   warp 4NC: the producer. Its lanes 0..7 each own one 16-slot page of a 128-key tile and load
//     that page's K and V rows of KV head g by TMA (2-D tensor map over the pool viewed as rows
//     of head_dim bf16, row = ((page * 2 + part) * kv_heads + head) * 16 + slot; boxes of 16 rows
//     x 64 columns, 128-byte swizzle) into a kStages-deep ring of shared-memory stages guarded
//     by mbarriers: full[s] (1 arrival + the bytes, by the producer) and empty[s] (every
//     consumer thread arrives once it has finished reading the stage).
// Keys past the last valid row's position are never loaded (causal tiles skipped); the last
// tile's rows at or past kv_end (the page tail, which may hold NaN, and pages not loaded at all)
// are masked to -inf in S and zeroed in V before P V (0 * NaN = NaN).
//
// Shared memory (base aligned to 1024 bytes, the 128-byte swizzle pattern's period):
//   Q: NC heads x HD/64 panels x [64 rows][128 B]            (written by the consumers, swizzled)
//   stage s: K then V, each HD/64 panels x [128 keys][128 B] (written by TMA, swizzled)
//   mbarriers: full / empty per stage (HopperSmem)
// HD 128, NC 2: 32 KB + 3 x 64 KB + 112 B = 229,488 B (1 block per SM).
//
// Variants (template parameter V, chosen by the launcher: PrefillKernel::kHopper / kHopperV5 /
// kHopperV6, see cuda/attention.h; the v2, v3, v4 and lpt schedules that v5 superseded were
// removed on 2026-12-02, their measurements are in docs/benchmarks.md). Same producer masking
// and results; they differ in the consumers' schedule, the ring and the block -> work map:
//   v1: per K/V tile S = Q K^T, wait, softmax, O += P V, wait (the validated reference). Grid
//       (tiles, head groups), tiles reversed inside each head group; one producer warp, one
//       joint ring of 3 (K, V) stages.
//   v5 (the default): intra-warpgroup pipelining (FA3's "2-stage" consumer: round t issues
//       S_t = Q K_t^T and O += P_{t-1} V_{t-1}, waits for S_t only and runs tile t's softmax
//       under the P V), ping-pong of the two consumer warpgroups (NC = 2), a split ring (K and
//       V each with their own barriers and producer warp; 3 stages each), a producer warpgroup
//       and setmaxnreg (40 / 232). Grid 1-D, block b = work item b: heaviest tile first across
//       every head group.
//   v6: v5 made persistent: grid = SMs, each block runs a static list of work items
//       (item_at), the ring and the ping-pong running on across items, so that the next item's
//       K/V tiles and Q load while the consumers finish this one and the block launch, the
//       ring's fill and the epilogue stop leaving the tensor cores idle. Q is double-buffered
//       and loaded by the producer by TMA (a tensor map over q); to pay for the second Q buffer
//       the K ring has 2 stages (K is released as soon as S_t completes), V keeps 3:
//       HD 128, NC 2: 2 x 32 KB + 2 x 32 KB + 3 x 32 KB + 112 B = 229,488 B.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/attention.h"
#include "cuda/attention_prefill_impl.h"
#include "cuda/cuda_check.h"
#include "cuda/hopper_sm90.cuh"
#include "cuda/mma.cuh"
#include "runtime/kv_layout.h"

namespace strata::cuda {

namespace {

using bf16 = __nv_bfloat16;
using namespace sm90;

constexpr int kBM = 64;                          // query rows per consumer warpgroup (a tile)
constexpr int kBN = 128;                         // keys per K/V tile
constexpr int kPagesPerTile = kBN / kBlockSize;  // 8: one producer lane per page
constexpr std::uint32_t kRowBytes = 128;         // one swizzled row: 64 bf16
static_assert(kPagesPerTile <= 32);

// The variants (template parameter V = the number in the names hopper_v5, hopper_v6; v1 =
// hopper): what each schedule does and how its shared memory is cut.
//   kPipelined: the v5/v6 consumer loop (consumer_pipelined) with a producer warpgroup and
//     setmaxnreg; else v1's loop and one producer warp.
//   kPersistent: grid = SMs, each block runs a static list of (tile, head group) work items.
//   kQBufs: Q buffers; 2 = the producer loads the next item's Q by TMA during this item.
//   kKStages / kVStages: ring depths; v1 uses one joint ring of (K, V) stages (kKStages =
//     kVStages), v5/v6 a split ring (K and V with their own barriers and producer warps).
template <int V>
struct Variant {
  static_assert(V == 1 || V == 5 || V == 6, "the Hopper kernel has variants 1, 5 and 6");
  static constexpr bool kPipelined = V != 1;
  static constexpr bool kPersistent = V == 6;
  static constexpr int kQBufs = V == 6 ? 2 : 1;
  static constexpr int kKStages = V == 6 ? 2 : 3;
  static constexpr int kVStages = 3;
};

template <int HD, int NC, int V>
struct HopperSmem {
  using Var = Variant<V>;
  static constexpr int kKSt = Var::kKStages, kVSt = Var::kVStages;
  static constexpr bool kSplit = Var::kPipelined;
  static_assert(kSplit || kKSt == kVSt, "a joint ring has one stage count");
  static constexpr int kPanels = HD / 64;                     // 64-column panels of a row
  static constexpr std::uint32_t kQPanel = kBM * kRowBytes;   // 8 KB
  static constexpr std::uint32_t kQHead = kPanels * kQPanel;  // one head's Q
  static constexpr std::uint32_t kKvPanel = kBN * kRowBytes;  // 16 KB
  static constexpr std::uint32_t kPart = kPanels * kKvPanel;  // a K (or V) tile
  static constexpr std::uint32_t kQ = 0;                      // Q buffer b, head w: (b NC + w)
  static constexpr std::uint32_t kKv = kQ + Var::kQBufs * NC * kQHead;
  // Joint ring: stage s = K then V at kKv + 2 s kPart. Split ring: the K stages, then the V's.
  static constexpr std::uint32_t kStep = kSplit ? kPart : 2 * kPart;
  static constexpr std::uint32_t kVBase = kSplit ? kKv + kKSt * kPart : kKv + kPart;
  static constexpr std::uint32_t k_off(int s) { return kKv + s * kStep; }
  static constexpr std::uint32_t v_off(int s) { return kVBase + s * kStep; }
  // mbarriers: full_k[kKSt], empty_k[kKSt], full_v[kVSt], empty_v[kVSt] (joint ring: full_k /
  // empty_k guard the whole stage), q_full[kQBufs], q_empty[kQBufs] (kQBufs = 2 only).
  static constexpr std::uint32_t kBar = kKv + (kKSt + kVSt) * kPart;
  static constexpr std::uint32_t kFullK = kBar, kEmptyK = kFullK + 8 * kKSt;
  static constexpr std::uint32_t kFullV = kEmptyK + 8 * kKSt, kEmptyV = kFullV + 8 * kVSt;
  static constexpr std::uint32_t kFullQ = kEmptyV + 8 * kVSt;
  static constexpr std::uint32_t kEmptyQ = kFullQ + 8 * Var::kQBufs;
  static constexpr std::uint32_t kBytes = kEmptyQ + 8 * Var::kQBufs;
  static constexpr std::uint32_t kAlloc = kBytes + 1024;  // slack to align the base
  // Bytes one page brings into a stage: K and V, 16 rows of HD bf16 each.
  static constexpr std::uint32_t kPageTx = 2 * kBlockSize * HD * 2;
  static_assert(kAlloc <= 232448, "exceeds the 227 KB per-block shared memory of sm_90");
  static_assert(kQPanel % 1024 == 0 && kKvPanel % 1024 == 0, "1024-aligned swizzle atoms");
};

// One work item: a 64-query tile x NC query heads h0 .. h0 + NC - 1 of KV group g.
struct Item {
  int seq, q0, nq, pos0, row0, h0, g, kv_end, num_kv_tiles;
};
__device__ __forceinline__ Item make_item(const PrefillAttentionParams& p, int tile, int h0) {
  Item it;
  it.seq = p.tile_seq[tile];
  it.q0 = p.tile_q0[tile];
  it.nq = p.nq[it.seq];
  it.pos0 = p.q_pos0[it.seq];
  it.row0 = p.row_start[it.seq];
  it.h0 = h0;
  it.g = h0 / (p.heads / p.kv_heads);
  const int last_q = min(it.q0 + kBM, it.nq) - 1;  // last valid query index of the tile
  it.kv_end = it.pos0 + last_q + 1;                // keys needed by the last valid row
  it.num_kv_tiles = (it.kv_end + kBN - 1) / kBN;
  return it;
}

// Heaviest tiles first: within a sequence later tiles see more keys, and the interface lists a
// sequence's tiles in q0 order. Work item w (v5, v6) = tile num_tiles - 1 - w / G, head group
// w % G (G = heads / NC): every head group of the heaviest tile first. v5: block b runs item b.
// v6 (grid of P blocks): round k gives items kP .. kP + P - 1, block c taking kP + c in even
// rounds and kP + P - 1 - c in odd ones (boustrophedon: a block that drew a heavy item in one
// round draws a light one in the next; by count as balanced as a dynamic queue at the three
// benchmark shapes, docs/benchmarks.md, and fixed by blockIdx: deterministic, no counter to
// reset, graph-capturable). v1: per head group (grid.y), tiles reversed.
template <int V>
__device__ __forceinline__ bool item_at(const PrefillAttentionParams& p, int groups, int nc, int k,
                                        int* tile, int* h0) {
  if constexpr (V == 1) {
    if (k > 0) return false;
    *tile = p.num_tiles - 1 - static_cast<int>(blockIdx.x);
    *h0 = static_cast<int>(blockIdx.y) * nc;
    return true;
  } else {
    int w = static_cast<int>(blockIdx.x);
    if constexpr (Variant<V>::kPersistent) {
      const int P = static_cast<int>(gridDim.x);
      w = k * P + ((k & 1) ? P - 1 - w : w);
      if (w >= p.num_tiles * groups) return false;
    } else if (k > 0) {
      return false;
    }
    *tile = p.num_tiles - 1 - w / groups;
    *h0 = (w % groups) * nc;
    return true;
  }
}

// ---- v5 / v6 consumer main loop over one work item ------------------------------------------
// Rounds r = 0 .. n (n = num_kv_tiles): round 0 issues S_0; round t (1 <= t < n) issues S_t then
// P_{t-1} V_{t-1}; round n issues P_{n-1} V_{n-1}. Each round's wgmma are issued behind one
// wgmma.fence ([wgmma] 9.7.15.6: required before a wgmma.mma_async whose accumulator or A
// registers were touched by other instructions: sacc by the softmax, o by the rescale, pa by the
// packing) and committed as one group per GEMM (9.7.15.7), S first. wait_group 1 (9.7.15.8: all
// but the newest group complete) then means S_t is in registers while P_{t-1} V_{t-1} may still
// run: the softmax of tile t reads and writes only sacc, m, l - never o or pa, the registers of
// the pending group (reading or writing them before its wait is undefined, 9.7.15.8). After
// wait_group 0, o is rescaled by tile t's alpha and pa overwritten by P_t.
//
// Split ring: K and V of tile t sit in stages (it0 + t) % kKSt and (it0 + t) % kVSt (it0: the
// tiles this block consumed in earlier items; the producer counts the same way), each guarded by
// its own full / empty barriers. wait_k(t) waits for K only before S_t, wait_v(t) for V (then
// zeroes the last tile's V rows past kv_end) before P_t V_t; K is released once S_t has
// completed, V once P_t V_t has. v6: Q sits in buffer qb, loaded by the producer (TMA) onto
// q_full; the consumers wait for it before S_0 and release it (q_empty) once S_{n-1} has
// completed, so the producer can load the item after next into it.
//
// Ping-pong (kPingPong, 2 consumer warpgroups): warpgroup w issues a round's wgmma only after
// bar.sync on barrier 4 + w (256 threads: its own 128 + the other warpgroup's 128 arrivals),
// and after issuing does bar.arrive on the other's barrier 5 - w (PTX ISA "bar, barrier": arrive
// does not wait). Warpgroup 1 arrives once on barrier 4 before its first item (the caller), so
// warpgroup 0 issues round 0 first. Turns strictly alternate - w can arrive on the other's
// barrier for round r + 1 only after its own sync of round r + 1, which needs the other's
// round-r arrival - so no barrier ever sees two arrivals from one side in one phase. The rounds
// of a block's items form one sequence of R rounds that both warpgroups run (they share every
// item): warpgroup 0 syncs on 4 R times and warpgroup 1 arrives there 1 + (R - 1) times (up
// front, then after every round but its block's last: `last_item`); warpgroup 1 syncs on 5 R
// times, warpgroup 0 arrives after each of its R rounds. The producer waits and the last tile's
// V zeroing (barrier 3, both warpgroups) come before the turn in each round: reaching them needs
// only the other's previous rounds, so no cycle.
template <int HD, int NC, int V, bool kPingPong>
__device__ __forceinline__ void consumer_pipelined(unsigned char* base_ptr, std::uint32_t base,
                                                   std::uint32_t sQ, std::uint32_t qfull,
                                                   std::uint32_t qempty, std::uint32_t qparity,
                                                   int it0, const Item& it, bool last_item, int wg,
                                                   int tw, int wq, int g4, int c4, float scale_log2,
                                                   float (&o)[HD / 2], float (&sacc)[kBN / 2],
                                                   float (&m)[2], float (&l)[2]) {
  using L = HopperSmem<HD, NC, V>;
  constexpr bool kTmaQ = Variant<V>::kQBufs == 2;
  constexpr int kConsumers = NC * 128;
  constexpr int kTurn0 = 4;  // barriers 4 (warpgroup 0's turn) and 5 (warpgroup 1's)
  const int n = it.num_kv_tiles, kv_end = it.kv_end;
  const int diag = it.pos0 + it.q0;  // position of tile row 0
  std::uint32_t pa[kBN / 16][4];
  float alpha[2];

  auto ks_of = [&](int t) { return (it0 + t) % L::kKSt; };
  auto kpar = [&](int t) { return static_cast<std::uint32_t>(((it0 + t) / L::kKSt) & 1); };
  auto vs_of = [&](int t) { return (it0 + t) % L::kVSt; };
  auto vpar = [&](int t) { return static_cast<std::uint32_t>(((it0 + t) / L::kVSt) & 1); };
  auto wait_k = [&](int t) { mbar_wait(base + L::kFullK + 8 * ks_of(t), kpar(t)); };
  auto wait_v = [&](int t) {
    mbar_wait(base + L::kFullV + 8 * vs_of(t), vpar(t));
    const int key0 = t * kBN;
    if (key0 + kBN > kv_end) {
      // Last tile: zero V rows kv_end - key0 .. kBN - 1 in every panel (whole 128-byte rows, so
      // the swizzle does not matter): the page tail may hold NaN and pages not loaded hold
      // whatever an earlier tile left. Both warpgroups read this V: all consumers split the
      // work, fence (generic stores -> wgmma reads), and meet before either issues P V.
      const std::uint32_t sV = base + L::v_off(vs_of(t));
      const int first = kv_end - key0;
      const int n16 = (kBN - first) * L::kPanels * 8;
      for (int i = wg * 128 + tw; i < n16; i += kConsumers) {
        const int pn = i / ((kBN - first) * 8), rem = i % ((kBN - first) * 8);
        const std::uint32_t off = pn * L::kKvPanel + (first + rem / 8) * kRowBytes + (rem % 8) * 16;
        *reinterpret_cast<uint4*>(base_ptr + (sV - base) + off) = make_uint4(0, 0, 0, 0);
      }
      fence_proxy_async_smem();
      named_bar_sync(3, kConsumers);
    }
  };
  auto release_k = [&](int t) {
    mbar_arrive(base + L::kEmptyK + 8 * ks_of(t));
    if constexpr (kTmaQ) {
      if (t == n - 1) mbar_arrive(qempty);  // S_{n-1} complete: Q no longer read
    }
  };
  auto release_v = [&](int t) { mbar_arrive(base + L::kEmptyV + 8 * vs_of(t)); };
  auto turn_begin = [&] {
    if constexpr (kPingPong) named_bar_sync(kTurn0 + wg, 256);
  };
  auto turn_end = [&](bool pass) {
    if constexpr (kPingPong) {
      if (pass) named_bar_arrive(kTurn0 + 1 - wg, 256);
    }
  };
  auto issue_s = [&](int t) {
    const std::uint32_t sK = base + L::k_off(ks_of(t));
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
      const std::uint32_t koff = (ks & 3) * 32u;
      const std::uint64_t da = desc_sw128(sQ + (ks >> 2) * L::kQPanel + koff, 16, 1024);
      const std::uint64_t db = desc_sw128(sK + (ks >> 2) * L::kKvPanel + koff, 16, 1024);
      wgmma_m64n128k16_ss(sacc, da, db, ks > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  auto issue_pv = [&](int t) {
    const std::uint32_t sV = base + L::v_off(vs_of(t));
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const std::uint64_t dv = desc_sw128(sV + kk * 16 * kRowBytes, L::kKvPanel, 1024);
      if constexpr (HD == 128)
        wgmma_m64n128k16_rs_tb(o, pa[kk], dv);
      else
        wgmma_m64n64k16_rs_tb(o, pa[kk], dv);
    }
    wgmma_commit();
  };
  // Mask and online softmax of tile t on sacc (v1's arithmetic); o is rescaled later.
  auto softmax = [&](int t) {
    const int key0 = t * kBN;
    if (key0 + kBN - 1 > diag || key0 + kBN > kv_end) {
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) {
        const int row = wq * 16 + g4 + 8 * ((i >> 1) & 1);
        const int key = key0 + 8 * (i >> 2) + 2 * c4 + (i & 1);
        if (key > diag + row || key >= kv_end) sacc[i] = -INFINITY;
      }
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = -INFINITY;
#pragma unroll
      for (int nn = 0; nn < kBN / 8; ++nn)
        mx = fmaxf(mx, fmaxf(sacc[4 * nn + 2 * hf], sacc[4 * nn + 2 * hf + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hf], mx);
      const float ms = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
      alpha[hf] = mma::fast_exp2(fmaf(m[hf], scale_log2, -ms));
      m[hf] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nn = 0; nn < kBN / 8; ++nn)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = mma::fast_exp2(fmaf(sacc[4 * nn + 2 * hf + e], scale_log2, -ms));
          sacc[4 * nn + 2 * hf + e] = pv;
          sum += pv;
        }
      l[hf] = l[hf] * alpha[hf] + sum;
    }
  };
  auto rescale_and_pack = [&] {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
      for (int nn = 0; nn < HD / 8; ++nn) {
        o[4 * nn + 2 * hf] *= alpha[hf];
        o[4 * nn + 2 * hf + 1] *= alpha[hf];
      }
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const __nv_bfloat162 v =
            __floats2bfloat162_rn(sacc[8 * kk + 2 * r], sacc[8 * kk + 2 * r + 1]);
        pa[kk][r] = *reinterpret_cast<const std::uint32_t*>(&v);
      }
  };

  // Round 0: S_0 alone.
  wait_k(0);
  if constexpr (kTmaQ) mbar_wait(qfull, qparity);
  turn_begin();
  fence_operands(sacc);
  wgmma_fence();
  issue_s(0);
  turn_end(true);
  wgmma_wait<0>();
  fence_operands(sacc);
  release_k(0);
  softmax(0);
  rescale_and_pack();  // o is still zero; alpha is finite (0 on the first tile)

  // Rounds 1 .. n-1: S_t and P_{t-1} V_{t-1} in flight together.
  for (int t = 1; t < n; ++t) {
    wait_k(t);
    wait_v(t - 1);
    turn_begin();
    fence_operands(sacc);
    fence_operands(o);
    wgmma_fence();
    issue_s(t);
    issue_pv(t - 1);
    turn_end(true);
    wgmma_wait<1>();  // S_t complete; P_{t-1} V_{t-1} may still run (o, pa untouched)
    fence_operands(sacc);
    release_k(t);
    softmax(t);
    wgmma_wait<0>();  // P_{t-1} V_{t-1} complete: stage t-1 no longer read
    fence_operands(o);
    // Also pins the packing of P_t (computed from sacc) after the wait, so that no new value of
    // pa can be placed while the old one is still an operand of the pending group.
    fence_operands(sacc);
    release_v(t - 1);
    rescale_and_pack();
  }

  // Round n: the last P V.
  wait_v(n - 1);
  turn_begin();
  fence_operands(o);
  wgmma_fence();
  issue_pv(n - 1);
  turn_end(wg == 0 || !last_item);  // warpgroup 1's block-last turn has no successor
  wgmma_wait<0>();
  fence_operands(o);
  release_v(n - 1);
}

// Threads per block: NC consumer warpgroups + the producer: one warp (v1) or a whole warpgroup
// (v5, v6: setmaxnreg acts on warpgroups), of which warp 0 loads K (and v6's Q) and warp 1 V.
template <int NC, int V>
constexpr int kThreads = NC * 128 + (Variant<V>::kPipelined ? 128 : 32);
// v5/v6 with 2 consumer warpgroups: 384 threads enter with 168 registers each (65536 / 384,
// rounded down to 8: the cap __launch_bounds__(384, 1) sets); the producer warpgroup drops to
// kProducerRegs and the consumers rise to kConsumerRegs: 128 x 40 + 256 x 232 = 64,512 =
// 384 x 168, exactly the block's pool, so the increase never waits for registers that do not
// exist (per SM sub-partition: 1 producer + 2 consumer warps, 40 x 32 + 2 x 232 x 32 = 16,128 of
// 16,384).
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;

template <int HD, int NC, int V>
__global__ void __launch_bounds__(kThreads<NC, V>, 1)
    prefill_attention_hopper_kernel(const __grid_constant__ CUtensorMap kv_map,
                                    const __grid_constant__ CUtensorMap q_map,
                                    const __grid_constant__ PrefillAttentionParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = HopperSmem<HD, NC, V>;
  using Var = Variant<V>;
  constexpr int kConsumers = NC * 128;
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t raw = smem_u32(smem_raw);
  const std::uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const base_ptr = smem_raw + (base - raw);
  const int groups = p.heads / NC;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;

  if (threadIdx.x == 0) {
    for (int s = 0; s < L::kKSt; ++s) {
      mbar_init(base + L::kFullK + 8 * s, 1);
      mbar_init(base + L::kEmptyK + 8 * s, kConsumers);
    }
    for (int s = 0; s < L::kVSt; ++s) {
      mbar_init(base + L::kFullV + 8 * s, 1);
      mbar_init(base + L::kEmptyV + 8 * s, kConsumers);
    }
    for (int b = 0; b < Var::kQBufs; ++b) {
      mbar_init(base + L::kFullQ + 8 * b, 1);
      mbar_init(base + L::kEmptyQ + 8 * b, kConsumers);
    }
    fence_mbarrier_init();
  }
  __syncthreads();  // the only block-wide barrier: the roles part here

  if (Var::kPipelined ? warp >= NC * 4 : warp == NC * 4) {
    // ---- producer ----
    if constexpr (Var::kPipelined) {
      // setmaxnreg (PTX ISA "setmaxnreg", sm_90a): .dec releases registers of the executing warp
      // to the CTA's pool, .inc blocks until the pool has enough; the same instruction must be
      // executed by all warps of the warpgroup (the whole producer warpgroup runs this branch,
      // the consumer warpgroups the other); counts are multiples of 8 in 24..256.
      if constexpr (NC == 2) setmaxnreg_dec<kProducerRegs>();
      // Split ring: warp 0 of the producer warpgroup loads K (full_k / empty_k; v6: also each
      // item's Q, before its first K tile), warp 1 loads V (full_v / empty_v), each over the
      // block's items in order with a running tile count T (stage T % stages, the
      // (T / stages)-th use: parity rule in hopper_sm90.cuh), each announcing only its part's
      // bytes; warps 2, 3 have no work.
      const int part = warp - NC * 4;
      if (part > 1) return;
      const int stages = part == 0 ? L::kKSt : L::kVSt;
      const std::uint32_t fb = base + (part == 0 ? L::kFullK : L::kFullV);
      const std::uint32_t eb = base + (part == 0 ? L::kEmptyK : L::kEmptyV);
      const std::uint32_t dst0 = base + (part == 0 ? L::k_off(0) : L::v_off(0));
      int T = 0;
      int tile = 0, h0 = 0;
      for (int k = 0; item_at<V>(p, groups, NC, k, &tile, &h0); ++k) {
        const Item it = make_item(p, tile, h0);
        if constexpr (Var::kQBufs == 2) {
          if (part == 0 && lane == 0) {
            // Q buffer k % 2 last held item k - 2's Q: wait for its release (the consumers'
            // (k / 2 - 1)-th completion of q_empty), then load NC heads x kPanels boxes of
            // 64 rows x 64 columns (rows past the tensor's end read as zeros; rows past nq
            // belong to the next sequence and only feed output rows that are not stored).
            const int b = k & 1;
            if (k >= 2)
              mbar_wait_or_trap(base + L::kEmptyQ + 8 * b,
                                static_cast<std::uint32_t>((k / 2 - 1) & 1));
            const std::uint32_t qf = base + L::kFullQ + 8 * b;
            mbar_arrive_expect_tx(qf, NC * L::kQHead);
            for (int w = 0; w < NC; ++w)
#pragma unroll
              for (int pn = 0; pn < L::kPanels; ++pn)
                tma_load_2d(base + L::kQ + (b * NC + w) * L::kQHead + pn * L::kQPanel, &q_map,
                            (h0 + w) * HD + pn * 64, it.row0 + it.q0, qf);
          }
        }
        const int* table = p.block_table + static_cast<long long>(it.seq) * p.table_stride;
        for (int t = 0; t < it.num_kv_tiles; ++t, ++T) {
          const int s = T % stages;
          if (T >= stages)
            mbar_wait_or_trap(eb + 8 * s, static_cast<std::uint32_t>((T / stages - 1) & 1));
          const int key0 = t * kBN;
          const int pages = min(kPagesPerTile, (it.kv_end - key0 + kBlockSize - 1) / kBlockSize);
          if (lane == 0) mbar_arrive_expect_tx(fb + 8 * s, pages * (L::kPageTx / 2));
          __syncwarp();
          if (lane < pages) {
            const long long page = table[key0 / kBlockSize + lane];
            const std::uint32_t dst = dst0 + s * L::kStep + lane * kBlockSize * kRowBytes;
            const int row = static_cast<int>(((page * 2 + part) * p.kv_heads + it.g) * kBlockSize);
#pragma unroll
            for (int pn = 0; pn < L::kPanels; ++pn)
              tma_load_2d(dst + pn * L::kKvPanel, &kv_map, pn * 64, row, fb + 8 * s);
          }
        }
      }
      return;
    } else {
      // v1: one warp, one joint ring of (K, V) stages guarded by full_k / empty_k.
      int tile = 0, h0 = 0;
      item_at<V>(p, groups, NC, 0, &tile, &h0);
      const Item it = make_item(p, tile, h0);
      const std::uint32_t full0 = base + L::kFullK, empty0 = base + L::kEmptyK;
      const int* table = p.block_table + static_cast<long long>(it.seq) * p.table_stride;
      for (int t = 0; t < it.num_kv_tiles; ++t) {
        const int s = t % L::kKSt;
        // Stage s last held tile t - kStages: wait for that use's release, the
        // (t / kStages - 1)-th completion of empty[s] (parity rule in hopper_sm90.cuh).
        if (t >= L::kKSt)
          mbar_wait(empty0 + 8 * s, static_cast<std::uint32_t>((t / L::kKSt - 1) & 1));
        const int key0 = t * kBN;
        const int pages = min(kPagesPerTile, (it.kv_end - key0 + kBlockSize - 1) / kBlockSize);
        // expect_tx before any copy can complete_tx on the barrier; the arrival is the phase's
        // single expected arrival, the phase completes when the bytes have landed too.
        if (lane == 0) mbar_arrive_expect_tx(full0 + 8 * s, pages * L::kPageTx);
        __syncwarp();
        if (lane < pages) {
          const long long page = table[key0 / kBlockSize + lane];
          const std::uint32_t dst0 = base + L::k_off(s) + lane * kBlockSize * kRowBytes;
#pragma unroll
          for (int part = 0; part < 2; ++part) {
            const int row = static_cast<int>(((page * 2 + part) * p.kv_heads + it.g) * kBlockSize);
#pragma unroll
            for (int pn = 0; pn < L::kPanels; ++pn)
              tma_load_2d(dst0 + part * L::kPart + pn * L::kKvPanel, &kv_map, pn * 64, row,
                          full0 + 8 * s);
          }
        }
      }
      return;  // the copies complete on the barriers; the consumers keep the block alive
    }
  }

  // ---- consumers ----
  if constexpr (Var::kPipelined && NC == 2) setmaxnreg_inc<kConsumerRegs>();
  const int wg = warp >> 2;                            // warpgroup = head h0 + wg
  const int tw = static_cast<int>(threadIdx.x) & 127;  // thread within the warpgroup
  const int wq = tw >> 5;                              // warp within: rows 16 wq .. 16 wq + 15
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const int g4 = (lane >> 2), c4 = lane & 3;
  constexpr bool kPingPong = Var::kPipelined && NC == 2;
  if constexpr (kPingPong) {
    if (wg == 1) named_bar_arrive(4, 256);  // warpgroup 0 takes the block's round 0 first
  }

  int it0 = 0;  // K/V tiles consumed in earlier items (the ring position)
  int tile = 0, h0 = 0;
  bool more = item_at<V>(p, groups, NC, 0, &tile, &h0);
  for (int k = 0; more; ++k) {
    const Item it = make_item(p, tile, h0);
    int next_tile = 0, next_h0 = 0;
    more = item_at<V>(p, groups, NC, k + 1, &next_tile, &next_h0);
    const int h = h0 + wg;
    const int qb = Var::kQBufs == 2 ? (k & 1) : 0;
    const std::uint32_t sQ = base + L::kQ + (qb * NC + wg) * L::kQHead;

    if constexpr (Var::kQBufs == 1) {
      // Q: 64 rows x HD of head h, rows past nq zero, written in the 128-byte swizzled layout
      // (16-byte chunk j of row r at chunk j ^ (r % 8) of the row: the layout TMA would write).
      constexpr int kChunks = HD / 8;
      for (int i = tw; i < kBM * kChunks; i += 128) {
        const int r = i / kChunks, c = i % kChunks;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (it.q0 + r < it.nq)
          v = *reinterpret_cast<const uint4*>(
              p.q + static_cast<long long>(it.row0 + it.q0 + r) * p.q_stride + h * HD + c * 8);
        const std::uint32_t off =
            (c >> 3) * L::kQPanel + r * kRowBytes + ((((c & 7) ^ (r & 7))) << 4);
        *reinterpret_cast<uint4*>(base_ptr + (sQ - base) + off) = v;
      }
      fence_proxy_async_smem();     // generic-proxy stores -> read by wgmma (async proxy)
      named_bar_sync(1 + wg, 128);  // the warpgroup's Q complete before its first wgmma
    }

    float o[HD / 2];
    float sacc[kBN / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; ++i) o[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < kBN / 2; ++i) sacc[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g4 (0) and g4 + 8 (1)

    if constexpr (!Var::kPipelined) {
      const int diag = it.pos0 + it.q0;  // position of tile row 0
      const int kv_end = it.kv_end;
      const std::uint32_t full0 = base + L::kFullK, empty0 = base + L::kEmptyK;
      for (int t = 0; t < it.num_kv_tiles; ++t) {
        const int s = t % L::kKSt;
        mbar_wait(full0 + 8 * s, static_cast<std::uint32_t>((t / L::kKSt) & 1));
        const int key0 = t * kBN;
        const std::uint32_t sK = base + L::k_off(s);
        const std::uint32_t sV = base + L::v_off(s);  // joint ring: sK + kPart

        if (key0 + kBN > kv_end) {
          // Last tile: zero V rows kv_end - key0 .. kBN - 1 in every panel (whole 128-byte rows,
          // so the swizzle does not matter). Both warpgroups read this V: all consumers split
          // the work, fence (generic stores -> wgmma reads), and meet before either issues P V.
          const int first = kv_end - key0;
          const int n16 = (kBN - first) * L::kPanels * 8;  // 16-byte chunks to clear
          for (int i = wg * 128 + tw; i < n16; i += kConsumers) {
            const int pn = i / ((kBN - first) * 8), rem = i % ((kBN - first) * 8);
            const std::uint32_t off =
                pn * L::kKvPanel + (first + rem / 8) * kRowBytes + (rem % 8) * 16;
            *reinterpret_cast<uint4*>(base_ptr + (sV - base) + off) = make_uint4(0, 0, 0, 0);
          }
          fence_proxy_async_smem();
          named_bar_sync(3, kConsumers);
        }

        // S = Q K^T over HD/16 k-steps: step ks reads bytes 32 (ks % 4) .. +31 of panel ks / 4
        // of every row (descriptor start advanced inside the swizzled row, base offset stays 0).
        fence_operands(sacc);
        wgmma_fence();  // sacc was read by the previous tile's softmax
#pragma unroll
        for (int ks = 0; ks < HD / 16; ++ks) {
          const std::uint32_t koff = (ks & 3) * 32u;
          const std::uint64_t da = desc_sw128(sQ + (ks >> 2) * L::kQPanel + koff, 16, 1024);
          const std::uint64_t db = desc_sw128(sK + (ks >> 2) * L::kKvPanel + koff, 16, 1024);
          wgmma_m64n128k16_ss(sacc, da, db, ks > 0 ? 1 : 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands(sacc);

        // Mask keys past a row's position and keys at or past kv_end (a select, so that NaN or
        // garbage K in the page tail or in unloaded pages disappears). Only tiles that reach
        // past row 0's position or past kv_end need it.
        if (key0 + kBN - 1 > diag || key0 + kBN > kv_end) {
#pragma unroll
          for (int i = 0; i < kBN / 2; ++i) {
            const int row = wq * 16 + g4 + 8 * ((i >> 1) & 1);
            const int key = key0 + 8 * (i >> 2) + 2 * c4 + (i & 1);
            if (key > diag + row || key >= kv_end) sacc[i] = -INFINITY;
          }
        }

        // Online softmax (raw-score max m, rescale by exp2((m_old - m_new) * scale log2 e)).
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          float mx = -INFINITY;
#pragma unroll
          for (int nn = 0; nn < kBN / 8; ++nn)
            mx = fmaxf(mx, fmaxf(sacc[4 * nn + 2 * hf], sacc[4 * nn + 2 * hf + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the 4 lanes of a row
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m[hf], mx);
          const float ms = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
          const float alpha = mma::fast_exp2(fmaf(m[hf], scale_log2, -ms));  // m_old = -inf: 0
          m[hf] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int nn = 0; nn < kBN / 8; ++nn)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pv = mma::fast_exp2(fmaf(sacc[4 * nn + 2 * hf + e], scale_log2, -ms));
              sacc[4 * nn + 2 * hf + e] = pv;
              sum += pv;
            }
          l[hf] = l[hf] * alpha + sum;
#pragma unroll
          for (int nn = 0; nn < HD / 8; ++nn) {
            o[4 * nn + 2 * hf] *= alpha;
            o[4 * nn + 2 * hf + 1] *= alpha;
          }
        }

        // P (bf16) as the A fragments of the kBN / 16 k-steps: a[kk][r] = (d[8kk + 2r],
        // d[8kk + 2r + 1]).
        std::uint32_t pa[kBN / 16][4];
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const __nv_bfloat162 v =
                __floats2bfloat162_rn(sacc[8 * kk + 2 * r], sacc[8 * kk + 2 * r + 1]);
            pa[kk][r] = *reinterpret_cast<const std::uint32_t*>(&v);
          }

        // O += P V: k-step kk covers keys 16 kk .. 16 kk + 15 = rows 16 kk.. of every V panel.
        fence_operands(o);
        wgmma_fence();  // o rescaled and pa written by ordinary instructions
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) {
          const std::uint64_t dv = desc_sw128(sV + kk * 16 * kRowBytes, L::kKvPanel, 1024);
          if constexpr (HD == 128)
            wgmma_m64n128k16_rs_tb(o, pa[kk], dv);
          else
            wgmma_m64n64k16_rs_tb(o, pa[kk], dv);
        }
        wgmma_commit();
        wgmma_wait<0>();  // the stage's K and V are no longer read
        fence_operands(o);
        mbar_arrive(empty0 + 8 * s);
      }
    } else {
      consumer_pipelined<HD, NC, V, kPingPong>(
          base_ptr, base, sQ, base + L::kFullQ + 8 * qb, base + L::kEmptyQ + 8 * qb,
          static_cast<std::uint32_t>((k >> 1) & 1), it0, it, !more, wg, tw, wq, g4, c4, scale_log2,
          o, sacc, m, l);
    }
    it0 += it.num_kv_tiles;

    // Normalise, write O (bf16) and LSE = scale * max + log(sum), natural log. v6: these
    // stores are issued while the other warpgroup's last P V runs and the next item's K/V and
    // Q are already loading; the next item's first wgmma needs none of their registers.
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float lt = l[hf];
      lt += __shfl_xor_sync(0xffffffffu, lt, 1);
      lt += __shfl_xor_sync(0xffffffffu, lt, 2);
      const int qi = it.q0 + wq * 16 + g4 + 8 * hf;
      if (qi < it.nq) {
        const float inv = lt > 0.0f ? 1.0f / lt : 0.0f;
        bf16* orow = p.out + static_cast<long long>(it.row0 + qi) * p.out_stride + h * HD;
#pragma unroll
        for (int nn = 0; nn < HD / 8; ++nn)
          *reinterpret_cast<__nv_bfloat162*>(orow + 8 * nn + 2 * c4) =
              __floats2bfloat162_rn(o[4 * nn + 2 * hf] * inv, o[4 * nn + 2 * hf + 1] * inv);
        if (p.lse && c4 == 0)
          p.lse[static_cast<long long>(it.row0 + qi) * p.heads + h] = m[hf] * p.scale + logf(lt);
      }
    }
    tile = next_tile;
    h0 = next_h0;
  }
#else
  __trap();  // built for sm_90a only (cuda/CMakeLists.txt)
#endif
}

// ---- host: the tensor map over the pool, cached per (device, pool, extent, shape) ----------

struct DriverApi {
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  PFN_cuMemGetAddressRange_v3020 range = nullptr;
};

const DriverApi& driver_api() {
  static const DriverApi api = [] {
    DriverApi a;
    a.encode = driver_fn<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled", 12000);
    a.range = driver_fn<PFN_cuMemGetAddressRange_v3020>("cuMemGetAddressRange", 12000);
    return a;
  }();
  return api;
}

struct MapEntry {
  int device;
  const void* pool;
  unsigned long long rows;
  int head_dim;
  CUtensorMap map;
};

// Rows of head_dim bf16 from the pool pointer to the end of its allocation (the tensor map's
// extent, so that a bad page id reads zeros instead of faulting); 0 if unknown.
unsigned long long pool_rows(const PrefillAttentionParams& p) {
  const DriverApi& api = driver_api();
  if (!api.range) return 0;
  CUdeviceptr b = 0;
  size_t size = 0;
  const auto ptr = reinterpret_cast<CUdeviceptr>(p.kv_pool);
  if (api.range(&b, &size, ptr) != CUDA_SUCCESS) return 0;
  return (b + size - ptr) / (static_cast<unsigned long long>(p.head_dim) * 2);
}

// Returns false (with `why`) when no map can be built for this pool.
bool kv_tensor_map(const PrefillAttentionParams& p, CUtensorMap* out, std::string* why) {
  const DriverApi& api = driver_api();
  if (!api.encode) {
    *why = "cuTensorMapEncodeTiled not available from the driver";
    return false;
  }
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  unsigned long long rows = pool_rows(p);
  constexpr unsigned long long kMaxRows = 0x7fffffffull;  // TMA coordinates are int32
  if (rows > kMaxRows) {
    *why = "the KV pool has more than 2^31 rows of head_dim (TMA coordinates are int32)";
    return false;
  }
  if (rows == 0) rows = kMaxRows;  // extent unknown: no bounds beyond the coordinate range
  static std::mutex mu;
  static std::vector<MapEntry> cache;  // a handful of pools per process
  std::lock_guard<std::mutex> lock(mu);
  for (const MapEntry& e : cache)
    if (e.device == device && e.pool == p.kv_pool && e.rows == rows && e.head_dim == p.head_dim) {
      *out = e.map;
      return true;
    }
  MapEntry e{device, p.kv_pool, rows, p.head_dim, {}};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.head_dim), rows};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.head_dim) * 2};  // bytes, dim 1
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(kBlockSize)};      // 128 B x 16 rows
  const cuuint32_t estrides[2] = {1, 1};
  const CUresult r =
      api.encode(&e.map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(p.kv_pool), dims,
                 strides, box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    *why = "cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) + ")";
    return false;
  }
  if (cache.size() >= 16) cache.erase(cache.begin());  // pools come and go in tests
  cache.push_back(e);
  *out = e.map;
  return true;
}

struct QMapEntry {
  int device;
  const void* q;
  unsigned long long rows, cols;
  int stride;
  CUtensorMap map;
};

bool device_is_sm90() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::vector<std::pair<int, bool>> known;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [d, ok] : known)
    if (d == device) return ok;
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  known.emplace_back(device, major == 9 && minor == 0);
  return known.back().second;
}

// v6: a tensor map over Q viewed as rows of heads * head_dim bf16 (row stride q_stride), boxes
// of 64 columns x 64 rows with the 128-byte swizzle: one box is one 64-column panel of a tile's
// Q. Extent: the rows of the allocation holding q (rows past it read as zeros). Cached as the
// pool's map is.
bool q_tensor_map(const PrefillAttentionParams& p, CUtensorMap* out, std::string* why) {
  const DriverApi& api = driver_api();
  if (!api.encode || !api.range) {
    *why = "cuTensorMapEncodeTiled or cuMemGetAddressRange not available from the driver";
    return false;
  }
  if (reinterpret_cast<std::uintptr_t>(p.q) % 16 != 0 || (p.q_stride * 2) % 16 != 0) {
    *why = "q or its row stride is not 16-byte aligned (TMA)";
    return false;
  }
  CUdeviceptr b = 0;
  size_t size = 0;
  const auto ptr = reinterpret_cast<CUdeviceptr>(p.q);
  if (api.range(&b, &size, ptr) != CUDA_SUCCESS) {
    *why = "the allocation holding q is unknown (cuMemGetAddressRange)";
    return false;
  }
  const unsigned long long rows =
      (b + size - ptr) / (static_cast<unsigned long long>(p.q_stride) * 2);
  if (rows == 0 || rows > 0x7fffffffull) {
    *why = "q has no row or more than 2^31 rows (TMA coordinates are int32)";
    return false;
  }
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const unsigned long long cols = static_cast<unsigned long long>(p.heads) * p.head_dim;
  static std::mutex mu;
  static std::vector<QMapEntry> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (const QMapEntry& e : cache)
    if (e.device == device && e.q == p.q && e.rows == rows && e.cols == cols &&
        e.stride == p.q_stride) {
      *out = e.map;
      return true;
    }
  QMapEntry e{device, p.q, rows, cols, p.q_stride, {}};
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.q_stride) * 2};  // bytes, dim 1
  const cuuint32_t box[2] = {64, 64};                                       // 128 B x 64 rows
  const cuuint32_t estrides[2] = {1, 1};
  const CUresult r =
      api.encode(&e.map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(p.q), dims, strides,
                 box, estrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    *why = "cuTensorMapEncodeTiled (q) failed (" + std::to_string(static_cast<int>(r)) + ")";
    return false;
  }
  if (cache.size() >= 16) cache.erase(cache.begin());
  cache.push_back(e);
  *out = e.map;
  return true;
}

// Streaming multiprocessors of the current device (the persistent grid), cached per device.
int sm_count() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::vector<std::pair<int, int>> known;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [d, n] : known)
    if (d == device) return n;
  int n = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  known.emplace_back(device, n);
  return n;
}

template <int HD, int NC, int V>
void launch_hopper(const CUtensorMap& kv_map, const CUtensorMap& q_map,
                   const PrefillAttentionParams& p, cudaStream_t s) {
  constexpr std::uint32_t bytes = HopperSmem<HD, NC, V>::kAlloc;
  CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_hopper_kernel<HD, NC, V>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)));
  // v1: (tiles, head groups); v5: 1-D, one work item per block, head group fastest; v6: one
  // block per SM (at most one per item), items by item_at's static rounds.
  const long long items = static_cast<long long>(p.num_tiles) * (p.heads / NC);
  const dim3 grid =
      Variant<V>::kPersistent
          ? dim3(static_cast<unsigned>(std::min<long long>(items, sm_count())))
          : (V == 1 ? dim3(p.num_tiles, p.heads / NC) : dim3(static_cast<unsigned>(items)));
  prefill_attention_hopper_kernel<HD, NC, V><<<grid, kThreads<NC, V>, bytes, s>>>(kv_map, q_map, p);
  CUDA_CHECK_LAUNCH();
}

template <int V>
void launch_hopper_variant(const CUtensorMap& kv_map, const CUtensorMap& q_map,
                           const PrefillAttentionParams& p, cudaStream_t s) {
  const bool pair = (p.heads / p.kv_heads) % 2 == 0;
  if (p.head_dim == 128) {
    if (pair)
      launch_hopper<128, 2, V>(kv_map, q_map, p, s);
    else
      launch_hopper<128, 1, V>(kv_map, q_map, p, s);
  } else {
    if (pair)
      launch_hopper<64, 2, V>(kv_map, q_map, p, s);
    else
      launch_hopper<64, 1, V>(kv_map, q_map, p, s);
  }
}

}  // namespace

bool launch_prefill_attention_hopper(const PrefillAttentionParams& p, cudaStream_t s,
                                     std::string* why, int variant) {
  if (variant != 1 && variant != 5 && variant != 6) {
    *why = "Hopper kernel variant " + std::to_string(variant) + " (takes 1, 5 and 6)";
    return false;
  }
  if (p.head_dim != 64 && p.head_dim != 128) {
    *why = "head_dim " + std::to_string(p.head_dim) + " (takes 64 and 128)";
    return false;
  }
  if (!device_is_sm90()) {
    *why = "the device is not compute capability 9.0 (the kernel is sm_90a code)";
    return false;
  }
  // The tensor map views the pool as rows of head_dim: pages must be exactly the K and V parts.
  if (p.page_elems != 2LL * p.kv_heads * kBlockSize * p.head_dim) {
    *why = "page_elems " + std::to_string(p.page_elems) + " is not 2 * kv_heads * 16 * head_dim";
    return false;
  }
  if (reinterpret_cast<std::uintptr_t>(p.kv_pool) % 16 != 0) {
    *why = "the KV pool is not 16-byte aligned (TMA)";
    return false;
  }
  CUtensorMap map;
  if (!kv_tensor_map(p, &map, why)) return false;
  if (static_cast<long long>(p.num_tiles) * p.heads > 0x7fffffffLL) {
    *why = "more than 2^31 - 1 blocks";
    return false;
  }
  if (variant == 1) {
    launch_hopper_variant<1>(map, map, p, s);  // q_map unused
  } else if (variant == 5) {
    launch_hopper_variant<5>(map, map, p, s);
  } else {
    CUtensorMap qmap;
    if (!q_tensor_map(p, &qmap, why)) return false;
    launch_hopper_variant<6>(map, qmap, p, s);
  }
  return true;
}

}  // namespace strata::cuda
