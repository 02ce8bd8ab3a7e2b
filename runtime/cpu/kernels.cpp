#include "runtime/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strata::cpu {

namespace {
// 4 fp32 lanes (GCC/Clang vector extension: SSE on x86-64, NEON on arm64). Two of them form
// the 8 partial sums every dot product here uses, folded in one fixed order.
using v4 = float __attribute__((vector_size(16)));
inline v4 load(const float* p) {
  v4 r;
  std::memcpy(&r, p, sizeof(r));
  return r;
}
// ((l0 + h0) + (l1 + h1)) + ((l2 + h2) + (l3 + h3)) + tail
inline float fold(v4 lo, v4 hi, float tail) {
  const v4 s = lo + hi;
  return ((s[0] + s[1]) + (s[2] + s[3])) + tail;
}
}  // namespace

float dot(const float* a, const float* b, int n) {
  v4 lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    lo += load(a + i) * load(b + i);
    hi += load(a + i + 4) * load(b + i + 4);
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return fold(lo, hi, tail);
}

namespace {
// Four output columns at once: each x chunk is loaded once for four weight rows. Same
// per-column arithmetic as dot().
void dot4(const float* x, const float* w0, const float* w1, const float* w2, const float* w3, int n,
          float* y) {
  v4 l0 = {}, h0 = {}, l1 = {}, h1 = {}, l2 = {}, h2 = {}, l3 = {}, h3 = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const v4 xl = load(x + i), xh = load(x + i + 4);
    l0 += xl * load(w0 + i), h0 += xh * load(w0 + i + 4);
    l1 += xl * load(w1 + i), h1 += xh * load(w1 + i + 4);
    l2 += xl * load(w2 + i), h2 += xh * load(w2 + i + 4);
    l3 += xl * load(w3 + i), h3 += xh * load(w3 + i + 4);
  }
  float t0 = 0, t1 = 0, t2 = 0, t3 = 0;
  for (; i < n; ++i) {
    t0 += x[i] * w0[i];
    t1 += x[i] * w1[i];
    t2 += x[i] * w2[i];
    t3 += x[i] * w3[i];
  }
  y[0] = fold(l0, h0, t0);
  y[1] = fold(l1, h1, t1);
  y[2] = fold(l2, h2, t2);
  y[3] = fold(l3, h3, t3);
}
}  // namespace

void matmul(ThreadPool& pool, const float* x, int rows, const float* w, int in, int out, float* y) {
  // Grain: about 64k multiply-adds per chunk before a second thread pays off.
  const std::int64_t grain =
      std::max<std::int64_t>(4, (1 << 16) / (static_cast<std::int64_t>(rows) * in + 1));
  const std::int64_t blocks = (out + 3) / 4;
  pool.parallel_for(blocks, (grain + 3) / 4, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const int o = static_cast<int>(b * 4);
      if (o + 4 <= out) {
        const float* w0 = w + static_cast<std::size_t>(o) * in;
        for (int t = 0; t < rows; ++t) {
          float r[4];
          dot4(x + static_cast<std::size_t>(t) * in, w0, w0 + in, w0 + 2 * in, w0 + 3 * in, in, r);
          float* yt = y + static_cast<std::size_t>(t) * out + o;
          yt[0] = r[0], yt[1] = r[1], yt[2] = r[2], yt[3] = r[3];
        }
      } else {
        for (int oo = o; oo < out; ++oo)
          for (int t = 0; t < rows; ++t)
            y[static_cast<std::size_t>(t) * out + oo] = dot(
                x + static_cast<std::size_t>(t) * in, w + static_cast<std::size_t>(oo) * in, in);
      }
    }
  });
}

void rms_norm(const float* x, const float* weight, int n, double eps, float* y) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * inv * weight[i];
}

void rope(float* v, int heads, int head_dim, const double* inv_freq, std::int64_t pos) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq[i];
    const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    for (int h = 0; h < heads; ++h) {
      float* p = v + static_cast<std::size_t>(h) * head_dim;
      const float a = p[i], b = p[i + half];
      p[i] = a * c - b * s;
      p[i + half] = b * c + a * s;
    }
  }
}

void silu_mul(const float* gate, const float* up, int n, float* out) {
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace strata::cpu
