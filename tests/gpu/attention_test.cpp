// Prefill and decode attention against an fp64 CPU reference on bf16-rounded random
// q/k/v in scattered pages. Bounds: output relative L2 <= 5e-3, LSE absolute <= 2e-3, no NaN
// (outputs poisoned first). Sweeps: head_dim 64/128, GQA 1/2/3/4/8, batch, lengths incl. 1,
// 17, 4096, chunked prefill over paged prior context, decode splits. Every prefill case runs
// every prefill kernel (PrefillKernel::kFa2, kFa2Single, kWmma, and the Hopper kernel's
// variants kHopper = v1, kHopperV5, kHopperV6) on the same inputs, each checked against the
// reference; the variants do v1's arithmetic in v1's order, so their count of outputs that
// differ from v1's bit for bit is printed too (a figure, expected 0; the gate is the
// reference), and v5 / v6 are launched twice and must agree with themselves bit for bit (v6's
// blocks take their work items by blockIdx: nothing in it may depend on timing).
// STRATA_ATTN_KERNELS=hopper,hopper_v6,... restricts the prefill kernels run. In
// the prefill cases every slot past a sequence's end (the tail of its last page, the spare pages)
// is NaN, so a kernel that lets 0 * NaN into P V fails. The page size is the fixed kBlockSize (16)
// of runtime/kv_layout.h.
#include "cuda/attention.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include "runtime/kv_layout.h"
#include "tests/gpu/gpu_test_util.h"

namespace strata::gputest {
namespace {

using namespace strata::cuda;

// STRATA_ATTN_KERNELS=name,name,... (prefill_kernel_name's names) restricts which prefill
// kernels run here (unset or empty: all) - e.g. to rerun without a variant that failed or hung.
bool prefill_kernel_selected(PrefillKernel k) {
  const char* v = std::getenv("STRATA_ATTN_KERNELS");
  if (!v || !*v) return true;
  const std::string list = std::string(",") + v + ",";
  return list.find(std::string(",") + prefill_kernel_name(k) + ",") != std::string::npos;
}

// A paged KV cache for `lens` sequences with random contents; K/V also kept as doubles.
struct PagedKv {
  KvLayout layout;
  int table_stride = 0;
  std::vector<int> table;                // [seqs, table_stride]
  std::vector<std::uint16_t> pool_bits;  // whole pool
  DeviceArray<bf16> pool;
  DeviceArray<int> d_table;
  double k(int s, int g, int j, int d) const { return val(s, g, j, d, false); }
  double v(int s, int g, int j, int d) const { return val(s, g, j, d, true); }
  double val(int s, int g, int j, int d, bool is_v) const {
    const int page = table[static_cast<std::size_t>(s) * table_stride + j / 16];
    const std::size_t off = page * layout.page_elems() +
                            (is_v ? layout.v_offset(g, j % 16) : layout.k_offset(g, j % 16)) + d;
    return bf16_to_float(pool_bits[off]);
  }
};

// nan_tail: every slot at or past a sequence's length in its pages (the last page's tail and
// the table's spare pages) holds NaN in K and V, as a reused pool may; kernels must mask them.
PagedKv make_kv(const std::vector<int>& lens, int kv_heads, int hd, std::mt19937_64& rng,
                bool nan_tail = false) {
  PagedKv kv;
  kv.layout = KvLayout{kv_heads, hd, 2};
  int maxp = 1;
  for (int l : lens) maxp = std::max(maxp, pages_for_slots(l));
  kv.table_stride = maxp + 3;
  const int num_pages = static_cast<int>(lens.size()) * kv.table_stride;
  std::vector<int> perm(static_cast<std::size_t>(num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  kv.table = perm;
  const Bf16Data data =
      random_bf16(static_cast<std::size_t>(num_pages) * kv.layout.page_elems(), 1.0, rng);
  kv.pool_bits = data.bits;
  if (nan_tail) {
    constexpr std::uint16_t kNanBits = 0x7FC0;  // bf16 quiet NaN
    for (std::size_t s = 0; s < lens.size(); ++s)
      for (int pi = 0; pi < kv.table_stride; ++pi)
        for (int slot = 0; slot < kBlockSize; ++slot) {
          if (pi * kBlockSize + slot < lens[s]) continue;
          const std::size_t page = static_cast<std::size_t>(kv.table[s * kv.table_stride + pi]);
          for (int g = 0; g < kv_heads; ++g)
            for (int d = 0; d < hd; ++d) {
              kv.pool_bits[page * kv.layout.page_elems() + kv.layout.k_offset(g, slot) + d] =
                  kNanBits;
              kv.pool_bits[page * kv.layout.page_elems() + kv.layout.v_offset(g, slot) + d] =
                  kNanBits;
            }
        }
  }
  kv.pool = to_device_bf16(kv.pool_bits);
  kv.d_table = to_device(kv.table);
  return kv;
}

// fp64 attention of one query (head h, kv head g) over keys [0, n) of sequence s.
void ref_attend(const PagedKv& kv, int s, int g, const double* q, int n, int hd, double scale,
                double* out, double* lse, std::vector<double>* logits = nullptr) {
  std::vector<double> sc(static_cast<std::size_t>(n));
  double mx = -1e300;
  for (int j = 0; j < n; ++j) {
    double d = 0;
    for (int e = 0; e < hd; ++e) d += q[e] * kv.k(s, g, j, e);
    sc[static_cast<std::size_t>(j)] = d * scale;
    mx = std::max(mx, sc[static_cast<std::size_t>(j)]);
  }
  if (logits) *logits = sc;
  double sum = 0;
  for (auto& x : sc) sum += (x = std::exp(x - mx));
  for (int e = 0; e < hd; ++e) {
    double o = 0;
    for (int j = 0; j < n; ++j) o += sc[static_cast<std::size_t>(j)] * kv.v(s, g, j, e);
    out[e] = o / sum;
  }
  *lse = mx + std::log(sum);
}

struct PrefillCase {
  int heads, kv_heads, hd;
  std::vector<int> nq, prior;  // per sequence: query tokens, prior context
};

void run_prefill_case(const PrefillCase& c, std::mt19937_64& rng, const std::string& tag) {
  const int S = static_cast<int>(c.nq.size());
  std::vector<int> lens(static_cast<std::size_t>(S)), row_start(static_cast<std::size_t>(S));
  int T = 0;
  for (int s = 0; s < S; ++s) {
    lens[static_cast<std::size_t>(s)] =
        c.prior[static_cast<std::size_t>(s)] + c.nq[static_cast<std::size_t>(s)];
    row_start[static_cast<std::size_t>(s)] = T;
    T += c.nq[static_cast<std::size_t>(s)];
  }
  PagedKv kv = make_kv(lens, c.kv_heads, c.hd, rng, /*nan_tail=*/true);
  const int q_stride = c.heads * c.hd + 40;  // padded rows, as in the fused qkv buffer
  const Bf16Data q = random_bf16(static_cast<std::size_t>(T) * q_stride, 1.0, rng);
  std::vector<int> tile_seq, tile_q0;
  for (int s = 0; s < S; ++s)
    for (int q0 = 0; q0 < c.nq[static_cast<std::size_t>(s)]; q0 += 64)
      tile_seq.push_back(s), tile_q0.push_back(q0);
  auto d_q = to_device_bf16(q.bits);
  auto d_rs = to_device(row_start);
  auto d_nq = to_device(c.nq);
  auto d_p0 = to_device(c.prior);
  auto d_ts = to_device(tile_seq);
  auto d_tq = to_device(tile_q0);
  DeviceArray<bf16> out(static_cast<std::size_t>(T) * c.heads * c.hd);
  DeviceArray<float> lse(static_cast<std::size_t>(T) * c.heads);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.hd));
  std::vector<double> ref_o(out.size()), ref_lse(lse.size());
  parallel_for(T * c.heads, [&](int idx) {
    const int t = idx / c.heads, h = idx % c.heads;
    int s = S - 1;
    while (row_start[static_cast<std::size_t>(s)] > t) --s;
    const int qpos =
        c.prior[static_cast<std::size_t>(s)] + t - row_start[static_cast<std::size_t>(s)];
    std::vector<double> qv(static_cast<std::size_t>(c.hd));
    for (int e = 0; e < c.hd; ++e)
      qv[static_cast<std::size_t>(e)] =
          q.val[static_cast<std::size_t>(t) * q_stride + h * c.hd + e];
    ref_attend(kv, s, h / (c.heads / c.kv_heads), qv.data(), qpos + 1, c.hd, scale,
               ref_o.data() + (static_cast<std::size_t>(t) * c.heads + h) * c.hd,
               &ref_lse[static_cast<std::size_t>(idx)]);
  });
  std::vector<double> hopper_v1_o;  // v1's output, for the bitwise comparison of v5 and v6
  for (const PrefillKernel kern :
       {PrefillKernel::kFa2, PrefillKernel::kFa2Single, PrefillKernel::kWmma,
        PrefillKernel::kHopper, PrefillKernel::kHopperV5, PrefillKernel::kHopperV6}) {
    if (!prefill_kernel_selected(kern)) continue;
    const std::string ktag = std::string(prefill_kernel_name(kern)) + "_" + tag;
    const PrefillAttentionParams params{d_q.get(),
                                        q_stride,
                                        kv.pool.get(),
                                        static_cast<long long>(kv.layout.page_elems()),
                                        kv.d_table.get(),
                                        kv.table_stride,
                                        d_rs.get(),
                                        d_nq.get(),
                                        d_p0.get(),
                                        d_ts.get(),
                                        d_tq.get(),
                                        static_cast<int>(tile_seq.size()),
                                        out.get(),
                                        c.heads * c.hd,
                                        lse.get(),
                                        c.heads,
                                        c.kv_heads,
                                        c.hd,
                                        static_cast<float>(scale)};
    const bool hopper_variant =
        kern == PrefillKernel::kHopperV5 || kern == PrefillKernel::kHopperV6;
    std::vector<bf16> first_o;
    std::vector<float> first_lse;
    if (hopper_variant) {  // run-to-run: a first launch, kept bit for bit
      poison(out);
      poison(lse);
      launch_prefill_attention(params, nullptr, kern);
      CUDA_CHECK(cudaDeviceSynchronize());
      first_o = to_host(out);
      first_lse = to_host(lse);
    }
    poison(out);
    poison(lse);
    launch_prefill_attention(params, nullptr, kern);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (hopper_variant) {
      const auto again_o = to_host(out);
      const auto again_lse = to_host(lse);
      EXPECT_EQ(std::memcmp(again_o.data(), first_o.data(), again_o.size() * sizeof(bf16)), 0)
          << ktag << ": O differs bitwise between two launches";
      EXPECT_EQ(std::memcmp(again_lse.data(), first_lse.data(), again_lse.size() * sizeof(float)),
                0)
          << ktag << ": LSE differs bitwise between two launches";
    }
    const std::vector<double> got_o = to_host_bf16(out.get(), out.size());
    const ErrStats eo = compare(got_o, ref_o);
    const auto got_lse = to_host(lse);
    const ErrStats el = compare(std::vector<double>(got_lse.begin(), got_lse.end()), ref_lse);
    EXPECT_EQ(eo.nan + el.nan, 0u) << ktag;
    EXPECT_LE(eo.rel_l2, 5e-3) << ktag;
    EXPECT_LE(el.max_abs, 2e-3) << ktag;
    figure("prefill_rel_l2_" + ktag, eo.rel_l2);
    figure("prefill_lse_abs_" + ktag, el.max_abs);
    if (kern == PrefillKernel::kHopper) hopper_v1_o = got_o;
    if (hopper_variant && hopper_v1_o.size() == got_o.size()) {
      std::size_t differ = 0;
      for (std::size_t i = 0; i < got_o.size(); ++i)
        differ += got_o[i] != hopper_v1_o[i] ? 1u : 0u;  // NaN counts as differing
      figure("prefill_bits_differ_vs_hopper_" + ktag, static_cast<double>(differ));
    }
  }
}

TEST(GpuAttention, PrefillSweep) {
  REQUIRE_GPU();
  std::mt19937_64 rng(21);
  for (int hd : {64, 128}) {
    for (auto [h, kvh] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{32, 8}, std::pair{16, 2},
                          std::pair{12, 4}, std::pair{8, 4}}) {
      const std::string tag = "hd" + std::to_string(hd) + "_g" + std::to_string(h / kvh);
      // ragged batch: 1, 17, 130 tokens from scratch
      run_prefill_case({h, kvh, hd, {1, 17, 130}, {0, 0, 0}}, rng, tag + "_ragged");
      // chunked prefill: chunks after paged prior context (prior not a page multiple)
      run_prefill_case({h, kvh, hd, {64, 33, 1}, {100, 7, 250}}, rng, tag + "_chunked");
    }
  }
}

// Ragged batch mixing fresh prompts and chunks after prior context, several 64-row tiles per
// sequence, prior lengths on and off the 64-key tile grid (Llama-3 8B head shape).
TEST(GpuAttention, PrefillRaggedMixed) {
  REQUIRE_GPU();
  std::mt19937_64 rng(25);
  run_prefill_case({32, 8, 128, {300, 64, 129, 1, 200}, {0, 512, 31, 4000, 64}}, rng,
                   "hd128_g4_ragged_mixed");
  run_prefill_case({8, 1, 64, {191, 65, 17}, {0, 63, 1}}, rng, "hd64_g8_ragged_mixed");
}

// More work items than two per SM, so that v6's persistent blocks run several items each: the
// K/V ring, the Q double buffer's parity and the warpgroup ping-pong carried across items, a
// light item after a heavy one. hd 128 with head pairs (NC 2) and hd 64 with an odd GQA group
// (NC 1); ragged, with and without prior context.
TEST(GpuAttention, PrefillPersistentManyItems) {
  REQUIRE_GPU();
  std::mt19937_64 rng(26);
  run_prefill_case({32, 8, 128, {2048, 1500, 777, 1}, {0, 300, 1000, 61}}, rng,
                   "hd128_g4_many_items");
  run_prefill_case({12, 4, 64, {3000, 517}, {0, 129}}, rng, "hd64_g3_many_items");
}

TEST(GpuAttention, PrefillLong4096) {
  REQUIRE_GPU();
  std::mt19937_64 rng(22);
  run_prefill_case({8, 2, 128, {4096}, {0}}, rng, "hd128_g4_len4096");
  run_prefill_case({4, 1, 64, {1000}, {3096}}, rng, "hd64_g4_chunk1000_after3096");
}

void run_decode_case(int heads, int kv_heads, int hd, const std::vector<int>& lens, int splits,
                     bool with_logits, std::mt19937_64& rng, const std::string& tag, int unroll = 0,
                     int repeats = 0, int kernel = kDecodeDefault, int mma_shape = 0) {
  const int B = static_cast<int>(lens.size());
  PagedKv kv = make_kv(lens, kv_heads, hd, rng);
  const int q_stride = (heads + 2 * kv_heads) * hd;
  const Bf16Data q = random_bf16(static_cast<std::size_t>(B) * q_stride, 1.0, rng);
  std::vector<int> q_row(static_cast<std::size_t>(B));
  std::iota(q_row.begin(), q_row.end(), 0);
  std::reverse(q_row.begin(), q_row.end());  // batch entry b reads row B-1-b
  auto d_q = to_device_bf16(q.bits);
  auto d_row = to_device(q_row);
  auto d_len = to_device(lens);
  const int maxlen = *std::max_element(lens.begin(), lens.end());
  DeviceArray<float> part_o(static_cast<std::size_t>(B) * heads * splits * hd),
      part_ml(static_cast<std::size_t>(B) * heads * splits * 2);
  DeviceArray<bf16> out(static_cast<std::size_t>(B) * heads * hd);
  DeviceArray<float> lse(static_cast<std::size_t>(B) * heads);
  DeviceArray<float> logits(with_logits ? static_cast<std::size_t>(B) * heads * maxlen : 0);
  poison(out);
  poison(lse);
  if (with_logits) poison(logits);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  DecodeAttentionParams params{d_q.get(),
                               q_stride,
                               d_row.get(),
                               kv.pool.get(),
                               static_cast<long long>(kv.layout.page_elems()),
                               kv.d_table.get(),
                               kv.table_stride,
                               d_len.get(),
                               B,
                               splits,
                               part_o.get(),
                               part_ml.get(),
                               out.get(),
                               heads * hd,
                               lse.get(),
                               with_logits ? logits.get() : nullptr,
                               maxlen,
                               heads,
                               kv_heads,
                               hd,
                               static_cast<float>(scale),
                               unroll};
  params.kernel = kernel;
  params.mma_shape = mma_shape;
  launch_decode_attention(params, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  // Determinism (issue 9): the same launch on the same inputs must give the same bits every
  // time (a run-to-run difference flips bf16 roundings and moves whole-model logits).
  if (repeats > 0) {
    const auto first_out = to_host(out);
    const auto first_lse = to_host(lse);
    int differing = 0;
    for (int r = 0; r < repeats; ++r) {
      poison(out);
      poison(lse);
      launch_decode_attention(params, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto o = to_host(out);
      const auto l = to_host(lse);
      if (std::memcmp(o.data(), first_out.data(), o.size() * sizeof(o[0])) != 0 ||
          std::memcmp(l.data(), first_lse.data(), l.size() * sizeof(l[0])) != 0)
        ++differing;
    }
    EXPECT_EQ(differing, 0) << tag << ": " << differing << " of " << repeats
                            << " repeated launches differ bitwise from the first";
    figure("decode_repeat_differing_launches_" + tag, differing);
  }
  std::vector<double> ref_o(out.size()), ref_lse(lse.size()), ref_logits, got_logits_v;
  std::vector<std::vector<double>> lg(static_cast<std::size_t>(B) * heads);
  parallel_for(B * heads, [&](int idx) {
    const int b = idx / heads, h = idx % heads;
    std::vector<double> qv(static_cast<std::size_t>(hd));
    for (int e = 0; e < hd; ++e)
      qv[static_cast<std::size_t>(e)] =
          q.val[static_cast<std::size_t>(q_row[static_cast<std::size_t>(b)]) * q_stride + h * hd +
                e];
    ref_attend(kv, b, h / (heads / kv_heads), qv.data(), lens[static_cast<std::size_t>(b)], hd,
               scale, ref_o.data() + static_cast<std::size_t>(idx) * hd,
               &ref_lse[static_cast<std::size_t>(idx)], &lg[static_cast<std::size_t>(idx)]);
  });
  // out is indexed by q_row: out row q_row[b] holds batch entry b.
  const auto got = to_host_bf16(out.get(), out.size());
  std::vector<double> got_o(out.size());
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < heads * hd; ++i)
      got_o[static_cast<std::size_t>(b) * heads * hd + i] =
          got[static_cast<std::size_t>(q_row[static_cast<std::size_t>(b)]) * heads * hd + i];
  const ErrStats eo = compare(got_o, ref_o);
  const auto gl = to_host(lse);
  const ErrStats el = compare(std::vector<double>(gl.begin(), gl.end()), ref_lse);
  EXPECT_EQ(eo.nan + el.nan, 0u) << tag;
  EXPECT_LE(eo.rel_l2, 5e-3) << tag;
  EXPECT_LE(el.max_abs, 2e-3) << tag;
  if (with_logits) {
    const auto glog = to_host(logits);
    for (int idx = 0; idx < B * heads; ++idx)
      for (int j = 0; j < lens[static_cast<std::size_t>(idx / heads)]; ++j) {
        ref_logits.push_back(lg[static_cast<std::size_t>(idx)][static_cast<std::size_t>(j)]);
        got_logits_v.push_back(glog[static_cast<std::size_t>(idx) * maxlen + j]);
      }
    const ErrStats e = compare(got_logits_v, ref_logits);
    EXPECT_EQ(e.nan, 0u);
    EXPECT_LE(e.max_abs, 2e-3) << tag;
  }
  figure("decode_rel_l2_" + tag, eo.rel_l2);
  figure("decode_lse_abs_" + tag, el.max_abs);
}

// Every decode test runs both kernels (cuda/attention.h DecodeKernel).
const std::pair<int, const char*> kDecodeKernels[] = {
    {kDecodeTwoPass, ""}, {kDecodePipelined, "_pipe"}, {kDecodeMma, "_mma"}};

TEST(GpuAttention, DecodeSweep) {
  REQUIRE_GPU();
  std::mt19937_64 rng(23);
  for (int hd : {64, 128}) {
    for (auto [h, kvh] : {std::pair{4, 4}, std::pair{8, 4}, std::pair{32, 8}, std::pair{64, 8}}) {
      for (int splits : {1, 4, 17})
        for (const auto& [kernel, suffix] : kDecodeKernels) {
          const std::string tag = "hd" + std::to_string(hd) + "_g" + std::to_string(h / kvh) +
                                  "_s" + std::to_string(splits) + suffix;
          run_decode_case(h, kvh, hd, {1, 17, 300, 33, 16, 511, 2}, splits, splits == 4, rng, tag,
                          0, 0, kernel);
        }
    }
  }
}

TEST(GpuAttention, DecodeLong4096Batch) {
  REQUIRE_GPU();
  std::mt19937_64 rng(24);
  std::vector<int> lens(16);
  for (std::size_t i = 0; i < lens.size(); ++i)
    lens[i] = i == 0 ? 4096 : static_cast<int>(1 + rng() % 4096);
  run_decode_case(32, 8, 128, lens, 8, true, rng, "hd128_g4_b16_len4096");
  run_decode_case(8, 1, 64, {4096, 1, 17}, 33, false, rng, "hd64_g8_len4096");
  // The 8-keys-in-flight variant, both group-size instantiations and head dims.
  run_decode_case(32, 8, 128, lens, 2, true, rng, "hd128_g4_b16_len4096_u8", 8);
  run_decode_case(64, 8, 128, {4096, 1, 17, 300}, 3, true, rng, "hd128_g8_len4096_u8", 8);
  run_decode_case(8, 4, 64, {4096, 1, 17, 300}, 5, false, rng, "hd64_g2_len4096_u8", 8);
  run_decode_case(8, 1, 64, {4096, 1, 17, 300}, 1, false, rng, "hd64_g8_len4096_u8", 8);
  // The pipelined kernel on the same shapes.
  run_decode_case(32, 8, 128, lens, 8, true, rng, "hd128_g4_b16_len4096_pipe", 0, 0,
                  kDecodePipelined);
  run_decode_case(64, 8, 128, {4096, 1, 17, 300}, 3, true, rng, "hd128_g8_len4096_pipe", 0, 0,
                  kDecodePipelined);
  run_decode_case(8, 1, 64, {4096, 1, 17}, 33, false, rng, "hd64_g8_len4096_pipe", 0, 0,
                  kDecodePipelined);
  run_decode_case(8, 4, 64, {4096, 1, 17, 300}, 1, true, rng, "hd64_g2_len4096_pipe", 0, 0,
                  kDecodePipelined);
  // The tensor-core kernel on the same shapes.
  run_decode_case(32, 8, 128, lens, 8, true, rng, "hd128_g4_b16_len4096_mma", 0, 0, kDecodeMma);
  run_decode_case(32, 8, 128, lens, 1, true, rng, "hd128_g4_b16_len4096_s1_mma", 0, 0, kDecodeMma);
  run_decode_case(64, 8, 128, {4096, 1, 17, 300}, 3, true, rng, "hd128_g8_len4096_mma", 0, 0,
                  kDecodeMma);
  run_decode_case(8, 1, 64, {4096, 1, 17}, 33, false, rng, "hd64_g8_len4096_mma", 0, 0, kDecodeMma);
  run_decode_case(8, 4, 64, {4096, 1, 17, 300}, 1, true, rng, "hd64_g2_len4096_mma", 0, 0,
                  kDecodeMma);
}

// Every (warps, stages) shape of the tensor-core kernel (DecodeAttentionParams::mma_shape) on
// ragged lengths, with logits, one and several splits.
TEST(GpuAttention, DecodeMmaShapes) {
  REQUIRE_GPU();
  std::mt19937_64 rng(26);
  for (int shape = 0; shape <= 4; ++shape)
    for (int hd : {64, 128})
      for (int splits : {1, 5}) {
        const std::string tag = "mma_shape" + std::to_string(shape) + "_hd" + std::to_string(hd) +
                                "_s" + std::to_string(splits);
        run_decode_case(32, 8, hd, {1, 15, 16, 17, 300, 1000, 2049, 64}, splits, true, rng, tag, 0,
                        3, kDecodeMma, shape);
      }
}

// Issue 9: decode attention is bitwise repeatable (every block reduces its key slots'
// partial sums in a fixed order), for both head dims, GQA 2/4/8, 1 and several splits, and
// lengths where all four warps of a block hold keys (the old shared-memory float atomics
// summed them in warp-timing order).
TEST(GpuAttention, DecodeBitwiseRepeatable) {
  REQUIRE_GPU();
  std::mt19937_64 rng(25);
  for (int hd : {64, 128})
    for (auto [h, kvh] : {std::pair{4, 2}, std::pair{32, 8}, std::pair{64, 8}})
      for (int splits : {1, 3, 8})
        for (const auto& [kernel, suffix] : kDecodeKernels) {
          const std::string tag = "hd" + std::to_string(hd) + "_g" + std::to_string(h / kvh) +
                                  "_s" + std::to_string(splits) + suffix;
          run_decode_case(h, kvh, hd, {48, 49, 80, 300, 1, 17, 511}, splits, false, rng, tag, 0, 20,
                          kernel);
        }
}

}  // namespace
}  // namespace strata::gputest
