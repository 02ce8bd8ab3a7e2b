#include "runtime/cpu/kernels.h"

#include <algorithm>
#include <cmath>

namespace strata::cpu {

float dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

namespace {
// Four output columns at once: each x row is loaded once for four weight rows.
void dot4(const float* x, const float* w0, const float* w1, const float* w2, const float* w3, int n,
          float* y) {
  float a0[8] = {}, a1[8] = {}, a2[8] = {}, a3[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float xv = x[i + j];
      a0[j] += xv * w0[i + j];
      a1[j] += xv * w1[i + j];
      a2[j] += xv * w2[i + j];
      a3[j] += xv * w3[i + j];
    }
  }
  float t0 = 0, t1 = 0, t2 = 0, t3 = 0;
  for (; i < n; ++i) {
    t0 += x[i] * w0[i];
    t1 += x[i] * w1[i];
    t2 += x[i] * w2[i];
    t3 += x[i] * w3[i];
  }
  auto fold = [](const float* a, float t) {
    return (((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))) + t;
  };
  y[0] = fold(a0, t0);
  y[1] = fold(a1, t1);
  y[2] = fold(a2, t2);
  y[3] = fold(a3, t3);
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
