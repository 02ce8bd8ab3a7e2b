#include "runtime/cpu/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/cpu/kernels.h"
#include "runtime/error.h"
#include "runtime/fp8.h"
#include "runtime/kept_positions.h"
#include "runtime/kv_scales.h"
#include "runtime/snapkv.h"
#include "runtime/step_plan_check.h"

namespace strata::cpu {
namespace {

// Slots of one head, backed by a page table of the pool or by a contiguous scratch buffer
// ([slot][head_dim] elements of the pool's type), in fp32 or as e4m3 codes (KvCodec).
class Slots {
 public:
  Slots(KvPool& pool, int head, const std::vector<std::int32_t>& pages, const KvCodec& codec)
      : pool_(&pool),
        head_(head),
        pages_(&pages),
        head_dim_(pool.layout().head_dim),
        codec_(codec) {}
  Slots(std::byte* k, std::byte* v, int head_dim, const KvCodec& codec)
      : k_(k), v_(v), head_dim_(head_dim), codec_(codec) {}

  // The stored elements of a slot (head_dim of them, row_bytes()).
  std::byte* k_raw(int slot) const {
    return k_ ? k_ + static_cast<std::size_t>(slot) * row_bytes()
              : pool_->k_bytes(page(slot), head_, slot % kBlockSize);
  }
  std::byte* v_raw(int slot) const {
    return v_ ? v_ + static_cast<std::size_t>(slot) * row_bytes()
              : pool_->v_bytes(page(slot), head_, slot % kBlockSize);
  }
  std::size_t row_bytes() const {
    return static_cast<std::size_t>(head_dim_) * codec_.elem_bytes();
  }
  // K (V) of a slot in fp32: a pointer into fp32 storage, or `buf` (head_dim floats) holding the
  // dequantized codes, e4m3_to_float(code) * scale.
  const float* k(int slot, float* buf) const { return read(k_raw(slot), codec_.k_scale, buf); }
  const float* v(int slot, float* buf) const { return read(v_raw(slot), codec_.v_scale, buf); }
  bool fp8() const { return codec_.fp8; }
  const KvCodec& codec() const { return codec_; }
  int head_dim() const { return head_dim_; }

  float* score(int slot) const { return pool_->score(page(slot), head_, slot % kBlockSize); }
  // The token position the slot was written for; nullptr for scratch (slot p holds position p).
  std::int32_t* position(int slot) const {
    return k_ ? nullptr : pool_->position(page(slot), head_, slot % kBlockSize);
  }
  int capacity() const {
    return k_ ? std::numeric_limits<int>::max() : static_cast<int>(pages_->size()) * kBlockSize;
  }

 private:
  const float* read(const std::byte* p, float scale, float* buf) const {
    if (!codec_.fp8) return reinterpret_cast<const float*>(p);
    const float* lut = e4m3_values();
    const auto* c = reinterpret_cast<const std::uint8_t*>(p);
    for (int d = 0; d < head_dim_; ++d) buf[d] = lut[c[d]] * scale;  // = kv_dequantize
    return buf;
  }
  // e4m3_to_float of every code (the dequantization's hot path).
  static const float* e4m3_values() {
    static const auto table = [] {
      std::array<float, 256> t{};
      for (int c = 0; c < 256; ++c)
        t[static_cast<std::size_t>(c)] = e4m3_to_float(static_cast<std::uint8_t>(c));
      return t;
    }();
    return table.data();
  }
  int page(int slot) const { return (*pages_)[static_cast<std::size_t>(slot / kBlockSize)]; }
  KvPool* pool_ = nullptr;
  int head_ = 0;
  const std::vector<std::int32_t>* pages_ = nullptr;
  std::byte* k_ = nullptr;
  std::byte* v_ = nullptr;
  int head_dim_ = 0;
  KvCodec codec_;
};

// Slots [0, n) of one head as fp32 rows: pointers into fp32 storage, or one dequantized copy
// (each code is dequantized once per use, not once per query head).
class Rows {
 public:
  Rows(const Slots& s, int n) : s_(&s), hd_(static_cast<std::size_t>(s.head_dim())) {
    if (!s.fp8()) return;
    k_.resize(static_cast<std::size_t>(n) * hd_);
    v_.resize(static_cast<std::size_t>(n) * hd_);
    for (int j = 0; j < n; ++j) {
      s.k(j, &k_[j * hd_]);
      s.v(j, &v_[j * hd_]);
    }
  }
  const float* k(int j) const { return k_.empty() ? s_->k(j, nullptr) : &k_[j * hd_]; }
  const float* v(int j) const { return v_.empty() ? s_->v(j, nullptr) : &v_[j * hd_]; }

 private:
  const Slots* s_;
  std::size_t hd_;
  std::vector<float> k_, v_;
};

// K/V of the token at `pos` into `slot` (its position recorded next to the score), quantized
// to e4m3 with the head's scales in an fp8 cache.
void write_kv(const Slots& s, int slot, const float* k, const float* v, int head_dim,
              std::int32_t pos) {
  STRATA_CHECK(slot >= 0 && slot < s.capacity(),
               "slot " + std::to_string(slot) + " outside the page table");
  if (s.fp8()) {
    auto* kc = reinterpret_cast<std::uint8_t*>(s.k_raw(slot));
    auto* vc = reinterpret_cast<std::uint8_t*>(s.v_raw(slot));
    for (int d = 0; d < head_dim; ++d) {
      kc[d] = kv_quantize(k[d], s.codec().k_scale);
      vc[d] = kv_quantize(v[d], s.codec().v_scale);
    }
  } else {
    std::memcpy(s.k_raw(slot), k, sizeof(float) * head_dim);
    std::memcpy(s.v_raw(slot), v, sizeof(float) * head_dim);
  }
  if (auto* p = s.position(slot)) *p = pos;
}

// Slot `from` of `src` into slot `to` of `dst` (same layer and head: same element type and
// scales), the stored bytes as they are: compaction never requantizes.
void copy_kv(const Slots& dst, int to, const Slots& src, int from, std::int32_t pos) {
  STRATA_CHECK(to >= 0 && to < dst.capacity(),
               "slot " + std::to_string(to) + " outside the page table");
  std::memmove(dst.k_raw(to), src.k_raw(from), dst.row_bytes());
  std::memmove(dst.v_raw(to), src.v_raw(from), dst.row_bytes());
  if (auto* p = dst.position(to)) *p = pos;
}

// One query row of the group over slots [0, visible): out, lse and (when probs is given)
// each head's probabilities probs[h * visible + j].
void attend_row(const Slots& s, int visible, const AttnArgs& a, const float* q, float* out,
                double* lse, std::vector<float>* probs) {
  std::vector<float> logits(static_cast<std::size_t>(visible));
  std::vector<float> acc(static_cast<std::size_t>(a.head_dim));
  if (probs) probs->assign(static_cast<std::size_t>(a.group) * visible, 0.0f);
  const Rows rows(s, visible);
  for (int h = 0; h < a.group; ++h) {
    const float* qh = q + static_cast<std::size_t>(h) * a.head_dim;
    float m = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < visible; ++j) {
      logits[j] = dot(qh, rows.k(j), a.head_dim) * a.scale;
      m = std::max(m, logits[j]);
    }
    double sum = 0.0;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int j = 0; j < visible; ++j) {
      const float e = std::exp(logits[j] - m);
      logits[j] = e;
      sum += e;
      const float* vj = rows.v(j);
      for (int d = 0; d < a.head_dim; ++d) acc[d] += e * vj[d];
    }
    const float inv = static_cast<float>(1.0 / sum);
    float* oh = out + static_cast<std::size_t>(h) * a.head_dim;
    for (int d = 0; d < a.head_dim; ++d) oh[d] = acc[d] * inv;
    lse[h] = static_cast<double>(m) + std::log(sum);
    if (probs)
      for (int j = 0; j < visible; ++j)
        (*probs)[static_cast<std::size_t>(h) * visible + j] = logits[j] * inv;
  }
}

// Rows t0 .. t0+nrows-1 of a prefill chunk (no probabilities): row r is the query at
// position a.start + t0 + r and sees slots [0, a.start + t0 + r + 1). For every (row, head) the
// arithmetic is attend_row's, in the same order over the slots (logits, max, then exp, sum
// and the weighted V sum slot by slot), so the results are the same bits; the rows and heads
// of the block only share each K and V read (one pass over the slots for all of them).
void attend_rows(const Slots& s, int t0, int nrows, const AttnArgs& a) {
  const int G = a.group, hd = a.head_dim, vis0 = a.start + t0 + 1;
  const int vmax = vis0 + nrows - 1, rh = nrows * G;
  std::vector<float> logits(static_cast<std::size_t>(rh) * vmax);
  std::vector<float> m(static_cast<std::size_t>(rh), -std::numeric_limits<float>::infinity());
  std::vector<double> sum(static_cast<std::size_t>(rh), 0.0);
  std::vector<float> acc(static_cast<std::size_t>(rh) * hd, 0.0f);
  auto q = [&](int r, int h) {
    return a.q + static_cast<std::size_t>(t0 + r) * a.q_stride + static_cast<std::size_t>(h) * hd;
  };
  const Rows rows(s, vmax);
  for (int j = 0; j < vmax; ++j) {
    const float* kj = rows.k(j);
    for (int r = std::max(0, j + 1 - vis0); r < nrows; ++r)
      for (int h = 0; h < G; ++h) {
        const int i = r * G + h;
        float& l = logits[static_cast<std::size_t>(i) * vmax + j];
        l = dot(q(r, h), kj, hd) * a.scale;
        m[i] = std::max(m[i], l);
      }
  }
  for (int j = 0; j < vmax; ++j) {
    const float* vj = rows.v(j);
    for (int r = std::max(0, j + 1 - vis0); r < nrows; ++r)
      for (int h = 0; h < G; ++h) {
        const int i = r * G + h;
        const float e = std::exp(logits[static_cast<std::size_t>(i) * vmax + j] - m[i]);
        sum[i] += e;
        float* ac = &acc[static_cast<std::size_t>(i) * hd];
        for (int d = 0; d < hd; ++d) ac[d] += e * vj[d];
      }
  }
  for (int r = 0; r < nrows; ++r)
    for (int h = 0; h < G; ++h) {
      const int i = r * G + h;
      const float inv = static_cast<float>(1.0 / sum[i]);
      float* oh = a.out + static_cast<std::size_t>(t0 + r) * a.out_stride +
                  static_cast<std::size_t>(h) * hd;
      for (int d = 0; d < hd; ++d) oh[d] = acc[static_cast<std::size_t>(i) * hd + d] * inv;
      a.lse[static_cast<std::size_t>(t0 + r) * a.lse_stride + h] =
          static_cast<double>(m[i]) + std::log(sum[i]);
    }
}
constexpr int kRowBlock = 8;

// Score averages after one query that saw slots [0, visible) and wrote slot `own`.
void update_scores(const Slots& s, int visible, int own, const std::vector<float>& probs,
                   const AttnArgs& a) {
  const int alpha = a.slots->rule.window;
  for (int j = 0; j < visible; ++j) {
    float p = 0.0f;
    for (int h = 0; h < a.group; ++h) p += probs[static_cast<std::size_t>(h) * visible + j];
    float* sc = s.score(j);
    *sc = j == own ? p : snapkv::ema(*sc, p, alpha);
  }
}

// kSelect: score the prompt held in `src` with this chunk's window rows, keep C slots.
void select(const Slots& src, const Slots& dst, const AttnArgs& a) {
  const LayerRule& rule = a.slots->rule;
  const int L = a.prompt_len, alpha = rule.window, hd = a.head_dim;
  STRATA_CHECK(a.start + a.n == L && a.n >= alpha,
               "kSelect needs the chunk ending the prompt with all " + std::to_string(alpha) +
                   " window positions (start " + std::to_string(a.start) + ", n " +
                   std::to_string(a.n) + ", prompt " + std::to_string(L) + ")");
  std::vector<float> q(static_cast<std::size_t>(alpha) * a.group * hd);
  std::vector<double> lse(static_cast<std::size_t>(alpha) * a.group);
  for (int w = 0; w < alpha; ++w) {
    const int row = a.n - alpha + w;
    std::memcpy(&q[static_cast<std::size_t>(w) * a.group * hd], a.q + row * a.q_stride,
                sizeof(float) * a.group * hd);
    for (int h = 0; h < a.group; ++h)
      lse[static_cast<std::size_t>(w) * a.group + h] = a.lse[row * a.lse_stride + h];
  }
  std::vector<float> k(static_cast<std::size_t>(L) * hd);
  for (int i = 0; i < L; ++i) {
    float* ki = &k[static_cast<std::size_t>(i) * hd];
    if (const float* p = src.k(i, ki); p != ki) std::memcpy(ki, p, sizeof(float) * hd);
  }
  std::vector<double> S(static_cast<std::size_t>(L));
  if (a.fp64_scores) {
    snapkv::window_scores(q.data(), k.data(), lse.data(), L, alpha, a.group, hd, a.scale, S.data());
  } else {
    std::vector<float> lse32(lse.begin(), lse.end()), S32(static_cast<std::size_t>(L));
    snapkv::window_scores_f32(q.data(), k.data(), lse32.data(), L, alpha, a.group, hd, a.scale,
                              S32.data());
    std::copy(S32.begin(), S32.end(), S.begin());
  }
  const auto sel = snapkv::select_prompt(S, L, rule);
  for (std::size_t j = 0; j < sel.positions.size(); ++j) {
    const int slot = static_cast<int>(j);
    const std::int32_t pos = sel.positions[j];  // (the temp slot of position p is p)
    copy_kv(dst, slot, src, pos, pos);
    *dst.score(slot) = sel.scores[j];
  }
}

// kShrink on the post-step state `st`.
void shrink(const Slots& s, const LayerSlots& st, int shrink_to) {
  std::vector<float> scores(static_cast<std::size_t>(st.valid));
  for (int j = 0; j < st.valid; ++j) scores[j] = *s.score(j);
  const auto order = snapkv::shrink_order(scores, st.valid, st.ring_pos, st.rule, shrink_to);
  const std::size_t n = order.size(), rb = s.row_bytes();
  std::vector<std::byte> k(n * rb), v(n * rb);  // the stored bytes, as they are
  std::vector<float> sc(n);
  std::vector<std::int32_t> pos(n);
  for (std::size_t j = 0; j < n; ++j) {
    std::memcpy(&k[j * rb], s.k_raw(order[j]), rb);
    std::memcpy(&v[j * rb], s.v_raw(order[j]), rb);
    sc[j] = scores[static_cast<std::size_t>(order[j])];
    pos[j] = *s.position(order[j]);
  }
  for (std::size_t j = 0; j < n; ++j) {
    const Slots staged(&k[j * rb], &v[j * rb], s.head_dim(), s.codec());
    copy_kv(s, static_cast<int>(j), staged, 0, pos[j]);
    *s.score(static_cast<int>(j)) = sc[j];
  }
}

}  // namespace

void attend(KvPool& pool, int head, const AttnArgs& a) {
  const LayerSlots& ls = *a.slots;
  const LayerRule& rule = ls.rule;
  const int hd = a.head_dim;
  STRATA_CHECK(a.n >= 1 && (a.prefill || a.n == 1), "a decode step holds exactly one token");
  const Slots own(pool, head, ls.pages, a.codec);
  std::vector<float> probs;

  if (a.prefill && ls.direct_prefill(a.prompt_len)) {
    // Position p at slot p (full layers; sparse layers whose prompt fits).
    STRATA_CHECK(ls.valid == a.start, "layer holds " + std::to_string(ls.valid) +
                                          " slots, chunk starts at " + std::to_string(a.start));
    for (int t = 0; t < a.n; ++t)
      write_kv(own, a.start + t, a.k + t * a.kv_stride, a.v + t * a.kv_stride, hd, a.start + t);
    if (!rule.sparse()) {
      for (int t = 0; t < a.n; t += kRowBlock) attend_rows(own, t, std::min(kRowBlock, a.n - t), a);
    } else {
      for (int t = 0; t < a.n; ++t) {
        const int pos = a.start + t;
        attend_row(own, pos + 1, a, a.q + t * a.q_stride, a.out + t * a.out_stride,
                   a.lse + t * a.lse_stride, &probs);
        update_scores(own, pos + 1, pos, probs, a);
      }
    }
  } else if (a.prefill) {
    // Sparse layer, prompt longer than capacity: position p at temp slot p.
    STRATA_CHECK(ls.valid == 0, "sparse layer holds slots before its selection");
    const bool scratch = ls.temp_pages.empty();
    STRATA_CHECK(!scratch || (a.start == 0 && a.n == a.prompt_len && a.scratch_k),
                 "empty temp_pages need the whole prompt in one step");
    const Slots temp = scratch ? Slots(a.scratch_k, a.scratch_v, hd, a.codec)
                               : Slots(pool, head, ls.temp_pages, a.codec);
    for (int t = 0; t < a.n; ++t)
      write_kv(temp, a.start + t, a.k + t * a.kv_stride, a.v + t * a.kv_stride, hd, a.start + t);
    for (int t = 0; t < a.n; t += kRowBlock) attend_rows(temp, t, std::min(kRowBlock, a.n - t), a);
    if (ls.action == LayerAction::kSelect) select(temp, own, a);
  } else if (!rule.sparse()) {
    STRATA_CHECK(ls.valid == a.start, "full layer holds " + std::to_string(ls.valid) +
                                          " slots, decode at position " + std::to_string(a.start));
    write_kv(own, ls.valid, a.k, a.v, hd, a.start);
    attend_row(own, ls.valid + 1, a, a.q, a.out, a.lse, nullptr);
  } else {
    // Sparse decode.
    const int C = rule.capacity;
    STRATA_CHECK(ls.valid <= C || rule.policy == Policy::kSnapKv,
                 "valid " + std::to_string(ls.valid) + " > capacity " + std::to_string(C));
    if (rule.policy == Policy::kScored && ls.ring_full()) {
      std::vector<float> scores(static_cast<std::size_t>(C));
      for (int j = 0; j < C; ++j) scores[j] = *own.score(j);
      const int leaver = C - rule.ring + ls.ring_pos;
      const int dst = snapkv::resolve_leaver(scores, rule, ls.ring_pos);
      if (dst >= 0) {
        copy_kv(own, dst, own, leaver, *own.position(leaver));
        *own.score(dst) = scores[leaver];
      }
    }
    const int slot = ls.decode_slot();
    const int visible = ls.ring_full() ? C : ls.valid + 1;
    write_kv(own, slot, a.k, a.v, hd, a.start);
    attend_row(own, visible, a, a.q, a.out, a.lse, &probs);
    update_scores(own, visible, slot, probs, a);
  }

  if (ls.action == LayerAction::kShrink) {
    STRATA_CHECK(rule.sparse(), "kShrink on a full layer");
    LayerSlots post;  // the state after this step's work, under the old rule (counters only)
    post.rule = rule;
    post.valid = ls.valid;
    post.ring_pos = ls.ring_pos;
    advance_layer_before_shrink(post, LayerStep{a.n, a.prefill, a.prompt_len, false, 0});
    STRATA_CHECK(
        ls.shrink_to > rule.sinks + rule.window &&
            static_cast<int>(ls.pages.size()) * kBlockSize >= std::min(post.valid, ls.shrink_to),
        "kShrink to " + std::to_string(ls.shrink_to) + " slots is invalid");
    shrink(own, post, ls.shrink_to);
  }
}

KeptPositions kept_positions(KvPool& pool, const LayerSlots& after, std::int32_t tokens) {
  KeptCounter c(after.rule, tokens);
  if (tokens <= 0) return c.result();
  const int heads = pool.layout().kv_heads;
  if (!after.rule.sparse()) {
    c.add_full(after.valid, heads);  // slot p = position p, every head: count without reading
    return c.result();
  }
  for (int h = 0; h < heads; ++h)
    for (std::int32_t j = 0; j < after.valid; ++j) {
      const auto page = after.pages[static_cast<std::size_t>(j / kBlockSize)];
      c.add(*pool.position(page, h, j % kBlockSize));
    }
  return c.result();
}

}  // namespace strata::cpu
