// CPU emulation of the FA2 prefill attention kernel (cuda/attention_prefill_fa2.cu), no GPU:
// ldmatrix.x4 (plain and .trans) and mma.m16n8k16 are emulated lane by lane from the PTX
// ISA's fragment definitions (written here independently of cuda/prefill_frag.h), and the
// kernel's block algorithm is replayed with the kernel's index helpers (frag::*), its tile
// loop, causal masking, online softmax (exp2, bf16 P) and epilogue. Checked against an fp64
// reference: exact small-integer matmuls for the fragment mapping, and the attention
// bounds of the GPU test (rel L2 <= 5e-3, LSE abs <= 2e-3) for whole blocks over paged,
// chunked, ragged inputs.
#include "cuda/prefill_frag.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/attention.h"

namespace strata::cuda {
namespace {

using Reg = std::array<float, 2>;  // one .b32 register: two bf16 (low half first)
struct Frag4 {
  Reg r[4];
};

float round_bf16(float x) {  // round to nearest even, as __float2bfloat16_rn (finite x)
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].b16: lane 8m+i supplies the address of row i of
// matrix m; lane t receives in reg m: (row t/4, cols 2(t%4), 2(t%4)+1) of matrix m, or with
// .trans (rows 2(t%4), 2(t%4)+1, col t/4).
void ldmatrix_x4(Frag4 (&out)[32], const float* smem, const int (&lane_off)[32], bool trans) {
  float M[4][8][8];
  for (int m = 0; m < 4; ++m)
    for (int i = 0; i < 8; ++i)
      for (int c = 0; c < 8; ++c) M[m][i][c] = smem[lane_off[8 * m + i] + c];
  for (int t = 0; t < 32; ++t)
    for (int m = 0; m < 4; ++m)
      for (int e = 0; e < 2; ++e)
        out[t].r[m][static_cast<std::size_t>(e)] =
            trans ? M[m][2 * (t % 4) + e][t / 4] : M[m][t / 4][2 * (t % 4) + e];
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, g = t/4, c = t%4:
//   A: a0,a1 (g, 2c+e), a2,a3 (g+8, 2c+e), a4,a5 (g, 2c+8+e), a6,a7 (g+8, 2c+8+e)
//   B: b0,b1 (k 2c+e, n g), b2,b3 (k 2c+8+e, n g);  C/D: c_i (g + 8*(i>=2), 2c + i%2)
void mma(float (&d)[32][4], const Frag4 (&a)[32], const Reg (&b0)[32], const Reg (&b1)[32]) {
  double A[16][16], B[16][8];
  for (int t = 0; t < 32; ++t) {
    const int g = t / 4, c = t % 4;
    for (int e = 0; e < 2; ++e) {
      const auto ue = static_cast<std::size_t>(e);
      A[g][2 * c + e] = a[t].r[0][ue];
      A[g + 8][2 * c + e] = a[t].r[1][ue];
      A[g][2 * c + 8 + e] = a[t].r[2][ue];
      A[g + 8][2 * c + 8 + e] = a[t].r[3][ue];
      B[2 * c + e][g] = b0[t][ue];
      B[2 * c + 8 + e][g] = b1[t][ue];
    }
  }
  for (int t = 0; t < 32; ++t) {
    const int g = t / 4, c = t % 4;
    for (int i = 0; i < 4; ++i) {
      const int r = g + 8 * (i >> 1), n = 2 * c + (i & 1);
      double acc = 0;
      for (int k = 0; k < 16; ++k) acc += A[r][k] * B[k][n];
      d[t][i] += static_cast<float>(acc);
    }
  }
}

void mma_pair(float (&d0)[32][4], float (&d1)[32][4], const Frag4 (&a)[32], const Frag4 (&b)[32]) {
  Reg b0[32], b1[32], b2[32], b3[32];
  for (int t = 0; t < 32; ++t)
    b0[t] = b[t].r[0], b1[t] = b[t].r[1], b2[t] = b[t].r[2], b3[t] = b[t].r[3];
  mma(d0, a, b0, b1);
  mma(d1, a, b2, b3);
}

// ---- Fragment mapping on exact small-integer matrices ------------------------------------

TEST(PrefillFrag, SAndPVTilesExact) {
  constexpr int HD = 64, kBN = 64, MT = 2, kLd = HD + 8, kRowsQ = 128;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<float> sQ(kRowsQ * kLd), sK(kBN * kLd), sV(kBN * kLd);
  for (auto& x : sQ) x = static_cast<float>(small(rng));
  for (auto& x : sK) x = static_cast<float>(small(rng));
  for (auto& x : sV) x = static_cast<float>(small(rng));
  for (int warp = 0; warp < 4; ++warp) {
    const int hh = warp / 2, wrow = (warp % 2) * 32;  // HPB = 2, MT = 2 as in the kernel
    float s[MT][kBN / 8][32][4] = {};
    for (int ks = 0; ks < HD / 16; ++ks) {
      Frag4 a[MT][32];
      for (int mt = 0; mt < MT; ++mt) {
        int off[32];
        for (int ln = 0; ln < 32; ++ln)
          off[ln] =
              (hh * 64 + wrow + frag::a_row(ln)) * kLd + frag::a_col(ln) + mt * 16 * kLd + ks * 16;
        ldmatrix_x4(a[mt], sQ.data(), off, false);
      }
      for (int np = 0; np < kBN / 16; ++np) {
        int off[32];
        for (int ln = 0; ln < 32; ++ln)
          off[ln] = frag::b_row(ln) * kLd + frag::b_col(ln) + np * 16 * kLd + ks * 16;
        Frag4 b[32];
        ldmatrix_x4(b, sK.data(), off, false);
        for (int mt = 0; mt < MT; ++mt) mma_pair(s[mt][2 * np], s[mt][2 * np + 1], a[mt], b);
      }
    }
    // S element (mt, n, lane, i) = Q[row] . K[key] at the kernel's coordinates.
    for (int mt = 0; mt < MT; ++mt)
      for (int n = 0; n < kBN / 8; ++n)
        for (int ln = 0; ln < 32; ++ln)
          for (int i = 0; i < 4; ++i) {
            const int row = hh * 64 + wrow + mt * 16 + frag::c_row(ln, i);
            const int key = n * 8 + frag::c_col(ln, i);
            float ref = 0;
            for (int e = 0; e < HD; ++e) ref += sQ[row * kLd + e] * sK[key * kLd + e];
            ASSERT_EQ(s[mt][n][ln][i], ref) << "warp " << warp << " mt " << mt << " n " << n;
          }
    // Use P := S (exact integers) and O += P V with the kernel's packing and .trans loads.
    float o[MT][HD / 8][32][4] = {};
    for (int kk = 0; kk < kBN / 16; ++kk) {
      Frag4 a[MT][32];
      for (int mt = 0; mt < MT; ++mt)
        for (int ln = 0; ln < 32; ++ln)
          for (int r = 0; r < 4; ++r) {
            const float* sv = s[mt][2 * kk + frag::p_ntile(r)][ln];
            a[mt][ln].r[r] = {sv[frag::p_elem(r)], sv[frag::p_elem(r) + 1]};
          }
      for (int dp = 0; dp < HD / 16; ++dp) {
        int off[32];
        for (int ln = 0; ln < 32; ++ln)
          off[ln] = frag::a_row(ln) * kLd + frag::a_col(ln) + kk * 16 * kLd + dp * 16;
        Frag4 b[32];
        ldmatrix_x4(b, sV.data(), off, true);
        for (int mt = 0; mt < MT; ++mt) mma_pair(o[mt][2 * dp], o[mt][2 * dp + 1], a[mt], b);
      }
    }
    for (int mt = 0; mt < MT; ++mt)
      for (int dn = 0; dn < HD / 8; ++dn)
        for (int ln = 0; ln < 32; ++ln)
          for (int i = 0; i < 4; ++i) {
            const int row = hh * 64 + wrow + mt * 16 + frag::c_row(ln, i);
            const int d = dn * 8 + frag::c_col(ln, i);
            double ref = 0;
            for (int j = 0; j < kBN; ++j) {
              double sj = 0;
              for (int e = 0; e < HD; ++e) sj += sQ[row * kLd + e] * sK[j * kLd + e];
              ref += sj * sV[j * kLd + d];
            }
            ASSERT_EQ(o[mt][dn][ln][i], static_cast<float>(ref)) << "warp " << warp;
          }
  }
}

// ---- Whole-block replay of the kernel ----------------------------------------------------

struct HostPrefill {  // PrefillAttentionParams on the host (values as floats)
  std::vector<float> q;
  int q_stride = 0;
  std::vector<float> pool;
  long long page_elems = 0;
  std::vector<int> table;
  int table_stride = 0;
  std::vector<int> row_start, nq, q_pos0, tile_seq, tile_q0;
  std::vector<float> out, lse;
  int out_stride = 0, heads = 0, kv_heads = 0;
  float scale = 0;
};

template <int HD, int HPB, int MT>
void replay_block(HostPrefill& p, int tile, int head_block) {
  constexpr int kBM = 64, kBN = 64, kLd = HD + 8, kRowsW = 16 * MT, kWarpsPerHead = kBM / kRowsW;
  constexpr int kNT = kBN / 8, kDT = HD / 8;
  const int h0 = head_block * HPB;
  const auto at = [](const std::vector<int>& v, int i) { return v[static_cast<std::size_t>(i)]; };
  const int seq = at(p.tile_seq, tile), q0 = at(p.tile_q0, tile);
  const int nq = at(p.nq, seq), pos0 = at(p.q_pos0, seq), row0 = at(p.row_start, seq);
  const int g = h0 / (p.heads / p.kv_heads);
  const int last_q = std::min(q0 + kBM, nq) - 1;
  const int kv_end = pos0 + last_q + 1;
  const int num_kv_tiles = (kv_end + kBN - 1) / kBN;
  const int diag = pos0 + q0;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const long long part = p.page_elems / 2;
  std::vector<float> sQ(static_cast<std::size_t>(HPB * kBM * kLd)), sK(kBN * kLd), sV(kBN * kLd);
  for (int r = 0; r < HPB * kBM; ++r)
    for (int e = 0; e < HD; ++e) {
      const int hq = r / kBM, rl = r % kBM;
      sQ[static_cast<std::size_t>(r * kLd + e)] =
          q0 + rl < nq ? p.q[static_cast<std::size_t>(row0 + q0 + rl) * p.q_stride +
                             static_cast<std::size_t>((h0 + hq) * HD + e)]
                       : 0.0f;
    }
  struct WarpState {
    float o[MT][kDT][32][4] = {};
    float m[MT][2][32], l[MT][2][32];
  };
  std::vector<WarpState> ws(static_cast<std::size_t>(HPB * kWarpsPerHead));
  for (auto& w : ws)
    for (int mt = 0; mt < MT; ++mt)
      for (int hf = 0; hf < 2; ++hf)
        for (int ln = 0; ln < 32; ++ln) w.m[mt][hf][ln] = -INFINITY, w.l[mt][hf][ln] = 0;
  for (int t = 0; t < num_kv_tiles; ++t) {
    for (int r = 0; r < kBN; ++r) {
      const int j = t * kBN + r;
      for (int e = 0; e < HD; ++e) {
        float kv = 0, vv = 0;
        if (j < kv_end) {
          const long long base =
              static_cast<long long>(
                  p.table[static_cast<std::size_t>(seq * p.table_stride + (j >> 4))]) *
                  p.page_elems +
              (static_cast<long long>(g) * 16 + (j & 15)) * HD + e;
          kv = p.pool[static_cast<std::size_t>(base)];
          vv = p.pool[static_cast<std::size_t>(base + part)];
        }
        sK[static_cast<std::size_t>(r * kLd + e)] = kv;
        sV[static_cast<std::size_t>(r * kLd + e)] = vv;
      }
    }
    for (int warp = 0; warp < HPB * kWarpsPerHead; ++warp) {
      WarpState& w = ws[static_cast<std::size_t>(warp)];
      const int hh = warp / kWarpsPerHead, wrow = (warp % kWarpsPerHead) * kRowsW;
      float s[MT][kNT][32][4] = {};
      for (int ks = 0; ks < HD / 16; ++ks) {
        Frag4 a[MT][32];
        for (int mt = 0; mt < MT; ++mt) {
          int off[32];
          for (int ln = 0; ln < 32; ++ln)
            off[ln] = (hh * kBM + wrow + frag::a_row(ln)) * kLd + frag::a_col(ln) + mt * 16 * kLd +
                      ks * 16;
          ldmatrix_x4(a[mt], sQ.data(), off, false);
        }
        for (int np = 0; np < kBN / 16; ++np) {
          int off[32];
          for (int ln = 0; ln < 32; ++ln)
            off[ln] = frag::b_row(ln) * kLd + frag::b_col(ln) + np * 16 * kLd + ks * 16;
          Frag4 b[32];
          ldmatrix_x4(b, sK.data(), off, false);
          for (int mt = 0; mt < MT; ++mt) mma_pair(s[mt][2 * np], s[mt][2 * np + 1], a[mt], b);
        }
      }
      if (t * kBN + kBN - 1 > diag)
        for (int mt = 0; mt < MT; ++mt)
          for (int n = 0; n < kNT; ++n)
            for (int ln = 0; ln < 32; ++ln)
              for (int i = 0; i < 4; ++i) {
                const int row = wrow + mt * 16 + frag::c_row(ln, i);
                const int key = t * kBN + n * 8 + frag::c_col(ln, i);
                if (key > diag + row) s[mt][n][ln][i] = -INFINITY;
              }
      for (int mt = 0; mt < MT; ++mt)
        for (int hf = 0; hf < 2; ++hf) {
          float mx[32];
          for (int ln = 0; ln < 32; ++ln) {
            mx[ln] = -INFINITY;
            for (int n = 0; n < kNT; ++n)
              mx[ln] = std::fmax(mx[ln], std::fmax(s[mt][n][ln][2 * hf], s[mt][n][ln][2 * hf + 1]));
          }
          for (int x : {1, 2}) {  // __shfl_xor_sync
            float tmp[32];
            for (int ln = 0; ln < 32; ++ln) tmp[ln] = std::fmax(mx[ln], mx[ln ^ x]);
            std::copy(tmp, tmp + 32, mx);
          }
          for (int ln = 0; ln < 32; ++ln) {
            const float m_new = std::fmax(w.m[mt][hf][ln], mx[ln]);
            const float ms = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
            const float alpha = std::exp2(std::fma(w.m[mt][hf][ln], scale_log2, -ms));
            w.m[mt][hf][ln] = m_new;
            float sum = 0;
            for (int n = 0; n < kNT; ++n)
              for (int e = 0; e < 2; ++e) {
                const float pv = std::exp2(std::fma(s[mt][n][ln][2 * hf + e], scale_log2, -ms));
                s[mt][n][ln][2 * hf + e] = pv;
                sum += pv;
              }
            w.l[mt][hf][ln] = w.l[mt][hf][ln] * alpha + sum;
            for (int d = 0; d < kDT; ++d) {
              w.o[mt][d][ln][2 * hf] *= alpha;
              w.o[mt][d][ln][2 * hf + 1] *= alpha;
            }
          }
        }
      for (int kk = 0; kk < kBN / 16; ++kk) {
        Frag4 a[MT][32];
        for (int mt = 0; mt < MT; ++mt)
          for (int ln = 0; ln < 32; ++ln)
            for (int r = 0; r < 4; ++r) {
              const float* sv = s[mt][2 * kk + frag::p_ntile(r)][ln];
              a[mt][ln].r[r] = {round_bf16(sv[frag::p_elem(r)]),
                                round_bf16(sv[frag::p_elem(r) + 1])};
            }
        for (int dp = 0; dp < HD / 16; ++dp) {
          int off[32];
          for (int ln = 0; ln < 32; ++ln)
            off[ln] = frag::a_row(ln) * kLd + frag::a_col(ln) + kk * 16 * kLd + dp * 16;
          Frag4 b[32];
          ldmatrix_x4(b, sV.data(), off, true);
          for (int mt = 0; mt < MT; ++mt) mma_pair(w.o[mt][2 * dp], w.o[mt][2 * dp + 1], a[mt], b);
        }
      }
    }
  }
  for (int warp = 0; warp < HPB * kWarpsPerHead; ++warp) {
    WarpState& w = ws[static_cast<std::size_t>(warp)];
    const int hh = warp / kWarpsPerHead, wrow = (warp % kWarpsPerHead) * kRowsW, h = h0 + hh;
    for (int mt = 0; mt < MT; ++mt)
      for (int hf = 0; hf < 2; ++hf)
        for (int ln = 0; ln < 32; ++ln) {
          const int base = ln & ~3;
          float lt = 0;
          for (int x = 0; x < 4; ++x) lt += w.l[mt][hf][base + x];
          const int row = wrow + mt * 16 + frag::c_row(ln, 2 * hf);
          const int qi = q0 + row;
          if (qi >= nq) continue;
          const float inv = lt > 0 ? 1.0f / lt : 0.0f;
          const std::size_t orow =
              static_cast<std::size_t>(row0 + qi) * p.out_stride + static_cast<std::size_t>(h * HD);
          for (int d = 0; d < kDT; ++d)
            for (int e = 0; e < 2; ++e)
              p.out[orow + static_cast<std::size_t>(d * 8 + frag::c_col(ln, 2 * hf) + e)] =
                  round_bf16(w.o[mt][d][ln][2 * hf + e] * inv);
          if ((ln & 3) == 0)
            p.lse[static_cast<std::size_t>(row0 + qi) * p.heads + h] =
                w.m[mt][hf][ln] * p.scale + std::log(lt);
        }
  }
}

template <int HD, int HPB, int MT>
void replay_case(int heads, int kv_heads, const std::vector<int>& nq,
                 const std::vector<int>& prior) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  HostPrefill p;
  const int S = static_cast<int>(nq.size());
  p.heads = heads, p.kv_heads = kv_heads;
  p.q_stride = heads * HD + 24, p.out_stride = heads * HD;
  p.scale = 1.0f / std::sqrt(static_cast<float>(HD));
  p.page_elems = 2LL * kv_heads * 16 * HD;
  int T = 0, maxp = 1;
  for (int s = 0; s < S; ++s) {
    p.row_start.push_back(T);
    T += nq[static_cast<std::size_t>(s)];
    maxp = std::max(
        maxp, (prior[static_cast<std::size_t>(s)] + nq[static_cast<std::size_t>(s)] + 15) / 16);
    for (int q0 = 0; q0 < nq[static_cast<std::size_t>(s)]; q0 += 64)
      p.tile_seq.push_back(s), p.tile_q0.push_back(q0);
  }
  p.nq = nq, p.q_pos0 = prior;
  p.table_stride = maxp + 2;
  const int pages = S * p.table_stride;
  p.table.resize(static_cast<std::size_t>(pages));
  std::iota(p.table.begin(), p.table.end(), 0);
  std::shuffle(p.table.begin(), p.table.end(), rng);
  p.pool.resize(static_cast<std::size_t>(pages * p.page_elems));
  for (auto& x : p.pool) x = round_bf16(nd(rng));
  p.q.resize(static_cast<std::size_t>(T) * p.q_stride);
  for (auto& x : p.q) x = round_bf16(nd(rng));
  p.out.assign(static_cast<std::size_t>(T) * p.out_stride, NAN);
  p.lse.assign(static_cast<std::size_t>(T) * heads, NAN);
  for (int tile = 0; tile < static_cast<int>(p.tile_seq.size()); ++tile)
    for (int hb = 0; hb < heads / HPB; ++hb) replay_block<HD, HPB, MT>(p, tile, hb);
  // fp64 reference.
  double err2 = 0, ref2 = 0, lse_max = 0;
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < nq[static_cast<std::size_t>(s)]; ++i) {
      const int t = p.row_start[static_cast<std::size_t>(s)] + i;
      const int n = prior[static_cast<std::size_t>(s)] + i + 1;
      for (int h = 0; h < heads; ++h) {
        const int g = h / (heads / kv_heads);
        std::vector<double> sc(static_cast<std::size_t>(n));
        double mx = -1e300;
        auto kv = [&](int j, int e, bool v) {
          const long long page = p.table[static_cast<std::size_t>(s * p.table_stride + j / 16)];
          return static_cast<double>(p.pool[static_cast<std::size_t>(
              page * p.page_elems + (v ? p.page_elems / 2 : 0) + (g * 16LL + j % 16) * HD + e)]);
        };
        for (int j = 0; j < n; ++j) {
          double d = 0;
          for (int e = 0; e < HD; ++e)
            d += p.q[static_cast<std::size_t>(t) * p.q_stride +
                     static_cast<std::size_t>(h * HD + e)] *
                 kv(j, e, false);
          sc[static_cast<std::size_t>(j)] = d * p.scale;
          mx = std::max(mx, sc[static_cast<std::size_t>(j)]);
        }
        double sum = 0;
        for (auto& x : sc) sum += (x = std::exp(x - mx));
        for (int e = 0; e < HD; ++e) {
          double o = 0;
          for (int j = 0; j < n; ++j) o += sc[static_cast<std::size_t>(j)] * kv(j, e, true);
          o /= sum;
          const double got = p.out[static_cast<std::size_t>(t) * p.out_stride +
                                   static_cast<std::size_t>(h * HD + e)];
          ASSERT_FALSE(std::isnan(got)) << "t " << t << " h " << h << " e " << e;
          err2 += (got - o) * (got - o);
          ref2 += o * o;
        }
        const double got_lse = p.lse[static_cast<std::size_t>(t) * heads + h];
        ASSERT_FALSE(std::isnan(got_lse));
        lse_max = std::max(lse_max, std::abs(got_lse - (mx + std::log(sum))));
      }
    }
  EXPECT_LE(std::sqrt(err2 / ref2), 5e-3);
  EXPECT_LE(lse_max, 2e-3);
}

TEST(PrefillFrag, ReplayPairedHeadsHd64) {
  // Ragged from scratch (1, 17, 130 tokens) and chunks after unaligned prior context.
  replay_case<64, 2, 2>(4, 2, {1, 17, 130}, {0, 0, 0});
  replay_case<64, 2, 2>(4, 1, {64, 33, 1, 70}, {100, 7, 250, 64});
}

TEST(PrefillFrag, ReplaySingleHeadHd64) {
  replay_case<64, 1, 1>(3, 3, {1, 17, 130}, {0, 0, 0});
  replay_case<64, 1, 1>(3, 1, {64, 33, 70}, {100, 7, 64});
}

TEST(PrefillFrag, ReplayPairedHeadsHd128) {
  replay_case<128, 2, 2>(2, 1, {129, 5}, {0, 77});
}

// The run-time kernel choice (no GPU needed): hopper_v5 unless STRATA_PREFILL_ATTN says
// otherwise.
TEST(PrefillKernelChoice, EnvironmentDefaultIsHopperV5) {
  const char* v = std::getenv("STRATA_PREFILL_ATTN");
  const std::string s = v ? v : "";
  const PrefillKernel want = s == "wmma"         ? PrefillKernel::kWmma
                             : s == "fa2_single" ? PrefillKernel::kFa2Single
                             : s == "hopper"     ? PrefillKernel::kHopper
                             : s == "fa2"        ? PrefillKernel::kFa2
                             : s == "hopper_v6"  ? PrefillKernel::kHopperV6
                                                 : PrefillKernel::kHopperV5;
  EXPECT_EQ(prefill_kernel_from_env(), want);
  EXPECT_STREQ(prefill_kernel_name(PrefillKernel::kFa2), "fa2");
  EXPECT_STREQ(prefill_kernel_name(PrefillKernel::kWmma), "wmma");
  EXPECT_STREQ(prefill_kernel_name(PrefillKernel::kFa2Single), "fa2_single");
  EXPECT_STREQ(prefill_kernel_name(PrefillKernel::kHopper), "hopper");
  EXPECT_STREQ(prefill_kernel_name(PrefillKernel::kHopperV5), "hopper_v5");
  EXPECT_STREQ(prefill_kernel_name(PrefillKernel::kHopperV6), "hopper_v6");
}

}  // namespace
}  // namespace strata::cuda
