// Helpers shared by the GPU tests (tests/gpu/*_test.cpp): bf16-rounded random inputs,
// device upload/download, NaN poisoning, error metrics against fp64 references, and a
// small thread pool for the fp64 references (the GPU machine has 16 cores).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "runtime/model/make_model.h"
#include "runtime/model/safetensors.h"

namespace strata::gputest {

using cuda::DeviceArray;
using bf16 = __nv_bfloat16;

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU()                 \
  if (!::strata::gputest::have_gpu()) \
  GTEST_FAIL() << "no CUDA device: GPU tests run on the GPU machine"

// n values ~ N(0, std) rounded to bf16 (returned as the bf16 bits and as doubles).
struct Bf16Data {
  std::vector<std::uint16_t> bits;
  std::vector<double> val;
};
inline Bf16Data random_bf16(std::size_t n, double std, std::mt19937_64& rng) {
  std::normal_distribution<double> d(0.0, std);
  Bf16Data r;
  r.bits.resize(n);
  r.val.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    r.bits[i] = float_to_bf16(static_cast<float>(d(rng)));
    r.val[i] = bf16_to_float(r.bits[i]);
  }
  return r;
}

template <typename T>
DeviceArray<T> to_device(const std::vector<T>& h) {
  DeviceArray<T> d(h.size());
  if (!h.empty())
    CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
inline DeviceArray<bf16> to_device_bf16(const std::vector<std::uint16_t>& h) {
  DeviceArray<bf16> d(h.size());
  if (!h.empty()) CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
std::vector<T> to_host(const DeviceArray<T>& d) {
  std::vector<T> h(d.size());
  if (!h.empty()) CUDA_CHECK(cudaMemcpy(h.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost));
  return h;
}
inline std::vector<double> to_host_bf16(const bf16* d, std::size_t n) {
  std::vector<std::uint16_t> raw(n);
  CUDA_CHECK(cudaMemcpy(raw.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(raw[i]);
  return out;
}
// Poison: 0xFF bytes are NaN in bf16 and fp32, so an unwritten output fails the NaN check.
template <typename T>
void poison(DeviceArray<T>& d) {
  CUDA_CHECK(cudaMemset(d.get(), 0xFF, d.bytes()));
  // The memset runs on the legacy default stream, which the kernels under test on non-blocking
  // streams do not wait for: finish it here (a launch racing it read stale or half-poisoned data).
  CUDA_CHECK(cudaDeviceSynchronize());
}

struct ErrStats {
  double max_rel = 0;  // element-wise, over |ref| > floor
  double rel_l2 = 0;   // ||got - ref|| / ||ref||
  double max_abs = 0;
  std::size_t nan = 0;
};
inline ErrStats compare(const std::vector<double>& got, const std::vector<double>& ref,
                        double floor = 1e-3) {
  ErrStats s;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i]) || std::isinf(got[i])) {
      ++s.nan;
      continue;
    }
    const double d = got[i] - ref[i];
    num += d * d, den += ref[i] * ref[i];
    s.max_abs = std::max(s.max_abs, std::abs(d));
    if (std::abs(ref[i]) > floor) s.max_rel = std::max(s.max_rel, std::abs(d) / std::abs(ref[i]));
  }
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return s;
}

// Runs f(i) for i in [0, n) on all hardware threads.
inline void parallel_for(int n, const std::function<void(int)>& f) {
  const int nt =
      std::max(1, std::min<int>(n, static_cast<int>(std::thread::hardware_concurrency())));
  std::vector<std::thread> th;
  std::atomic<int> next{0};
  for (int t = 0; t < nt; ++t)
    th.emplace_back([&] {
      for (int i = next++; i < n; i = next++) f(i);
    });
  for (auto& t : th) t.join();
}

// Prints a figure in a greppable form for tools/gpu/run.sh: "FIGURE name value".
inline void figure(const std::string& name, double value) {
  std::printf("FIGURE %s %.6g\n", name.c_str(), value);
  std::fflush(stdout);
}

// A copy of a model directory whose config.json has another rms_norm_eps (weights linked):
// a deterministic perturbation of every activation, used to measure how much each policy
// amplifies a small numerical difference (vs_cpu).
inline std::string perturbed_dir(const std::string& dir, double eps) {
  namespace fs = std::filesystem;
  std::ostringstream name;
  name << dir << "_eps" << eps;
  const std::string out = name.str();
  if (!fs::exists(out + "/config.json")) {
    fs::create_directories(out);
    for (const auto& e : fs::directory_iterator(dir)) {
      const fs::path to = fs::path(out) / e.path().filename();
      if (e.path().filename() == "config.json" || fs::exists(to)) continue;
      fs::create_symlink(fs::absolute(e.path()), to);
    }
    std::ifstream in(dir + "/config.json");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string cfg = ss.str();
    const auto key = cfg.find("\"rms_norm_eps\"");
    const auto colon = cfg.find(':', key);
    const auto end = cfg.find_first_of(",}", colon);
    if (key == std::string::npos || colon == std::string::npos || end == std::string::npos)
      throw std::runtime_error("no rms_norm_eps in " + dir + "/config.json");
    std::ostringstream v;
    v << ' ' << eps;
    cfg = cfg.substr(0, colon + 1) + v.str() + cfg.substr(end);
    std::ofstream(out + "/config.json") << cfg;
  }
  return out;
}

// Writes (once per process) a `strata make-model` checkpoint of `preset` (`layers` 0: the
// preset's) with `seed` under the temp directory, named by `tag`; returns its directory.
inline std::string cached_model_dir(const std::string& tag, const std::string& preset, int layers,
                                    std::uint64_t seed) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("strata_" + tag + "_model_" + preset + "_" + std::to_string(layers)))
                              .string();
  if (!std::filesystem::exists(dir + "/config.json")) {
    MakeModelOptions o;
    o.out_dir = dir;
    o.preset = preset;
    o.seed = seed;
    o.layers = layers;
    make_model(o);
  }
  return dir;
}

// Worst per-position relative L2 of got vs ref ([n][vocab]); fails on NaN / size mismatch.
inline double worst_rel_l2(const std::vector<float>& got, const std::vector<float>& ref, int vocab,
                           const std::string& what) {
  EXPECT_EQ(got.size(), ref.size()) << what;
  if (got.size() != ref.size() || vocab <= 0) return 1e9;
  double worst = 0;
  for (std::size_t r = 0; r * vocab < got.size(); ++r) {
    double num = 0, den = 0;
    for (int v = 0; v < vocab; ++v) {
      const double g = got[r * vocab + v], e = ref[r * vocab + v];
      if (!std::isfinite(g)) {
        ADD_FAILURE() << what << ": non-finite logit at row " << r;
        return 1e9;
      }
      num += (g - e) * (g - e), den += e * e;
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
  }
  return worst;
}

}  // namespace strata::gputest
