#include "runtime/cpu/fp8_matmul.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "runtime/error.h"
#include "runtime/fp8.h"

namespace strata::cpu {

namespace {
const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int c = 0; c < 256; ++c)
      v[static_cast<std::size_t>(c)] = e4m3_to_float(static_cast<std::uint8_t>(c));
    return v;
  }();
  return t;
}

void quantize_row(const float* x, int cols, std::uint8_t* codes, float* scale) {
  float amax = 0.0f;
  for (int i = 0; i < cols; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = amax > 0.0f ? amax / kE4m3Max : 1.0f;
  for (int i = 0; i < cols; ++i) codes[i] = float_to_e4m3(x[i] / s);
  *scale = s;
}
}  // namespace

Fp8Rows quantize_rows_e4m3(const float* x, int rows, int cols, ThreadPool* pool) {
  Fp8Rows q;
  q.rows = rows;
  q.cols = cols;
  q.codes.resize(static_cast<std::size_t>(rows) * cols);
  q.scale.resize(static_cast<std::size_t>(rows));
  const auto body = [&](std::int64_t b, std::int64_t e) {
    for (auto r = b; r < e; ++r)
      quantize_row(x + static_cast<std::size_t>(r) * cols, cols,
                   q.codes.data() + static_cast<std::size_t>(r) * cols,
                   &q.scale[static_cast<std::size_t>(r)]);
  };
  if (pool)
    pool->parallel_for(rows, 16, body);
  else
    body(0, rows);
  return q;
}

Fp8Rows quantize_rows_e4m3_static(const float* x, int rows, int cols, float scale,
                                  ThreadPool* pool) {
  if (!(scale > 0.0f) || !std::isfinite(scale))
    throw InternalError("quantize_rows_e4m3_static: scale " + std::to_string(scale) +
                        " (must be finite and > 0)");
  Fp8Rows q;
  q.rows = rows;
  q.cols = cols;
  q.codes.resize(static_cast<std::size_t>(rows) * cols);
  q.scale.assign(static_cast<std::size_t>(rows), scale);
  const auto body = [&](std::int64_t b, std::int64_t e) {
    for (auto i = b * cols; i < e * cols; ++i)
      q.codes[static_cast<std::size_t>(i)] = float_to_e4m3(x[i] / scale);
  };
  if (pool)
    pool->parallel_for(rows, 16, body);
  else
    body(0, rows);
  return q;
}

// Why the fp64 sum is exact: every e4m3 value is an integer multiple of 2^−9 of magnitude
// ≤ 448 < 2^9, so every product is a multiple of 2^−18 below 448² < 2^17.62, and every
// partial sum of K ≤ 2^17 products is a multiple of 2^−18 below 2^34.62 — 53 bits hold it.
void matmul_e4m3(ThreadPool& pool, const Fp8Rows& x, const Fp8Rows& w, float* y) {
  if (x.cols != w.cols || x.cols > (1 << 17))
    throw InternalError("matmul_e4m3: inner sizes " + std::to_string(x.cols) + " and " +
                        std::to_string(w.cols) + " (equal, at most 131072)");
  const auto& lut = e4m3_table();
  const int in = x.cols, out = w.rows, rows = x.rows;
  // Decoded activations once (small: tokens × in).
  std::vector<float> xv(x.codes.size());
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = lut[x.codes[i]];
  const std::int64_t grain =
      std::max<std::int64_t>(1, (1 << 16) / (static_cast<std::int64_t>(rows) * in + 1));
  pool.parallel_for(out, grain, [&](std::int64_t o0, std::int64_t o1) {
    std::vector<float> wv(static_cast<std::size_t>(in));
    for (auto o = o0; o < o1; ++o) {
      const std::uint8_t* wc = w.codes.data() + static_cast<std::size_t>(o) * in;
      for (int k = 0; k < in; ++k) wv[static_cast<std::size_t>(k)] = lut[wc[k]];
      const float sw = w.scale[static_cast<std::size_t>(o)];
      for (int t = 0; t < rows; ++t) {
        const float* xt = xv.data() + static_cast<std::size_t>(t) * in;
        double s = 0.0;
        for (int k = 0; k < in; ++k)
          s += static_cast<double>(xt[k] * wv[static_cast<std::size_t>(k)]);
        const float acc = static_cast<float>(s);
        y[static_cast<std::size_t>(t) * out + o] = acc * x.scale[static_cast<std::size_t>(t)] * sw;
      }
    }
  });
}

}  // namespace strata::cpu
