// Tensor parallelism on GPUs (docs/tensor-parallel.md).
// On ONE GPU: two ranks of the sharded CUDA backend on the same device, joined by
//   host-staged collectives (eager), equal TP=1 — slices, local heads, vocabulary gather.
// Needs 2 GPUs (skips otherwise):
//   NCCL communicators of two in-process ranks (all-reduce bf16, all-gather fp32);
//   TP=2 logits equal TP=1 logits, teacher-forced, on Llama-3-8B-shaped random weights (4
//   layers), sparsity off and on, CUDA graphs on (the all-reduces inside the decode graphs);
//   a Llama-3-70B-shaped model (8 layers) built sharded directly on the GPUs runs a step;
//   rank 1 as a "separate process" (a thread with its own rank links, NCCL communicator and
//   follower loop, cuda/tp/tp_process.h) gives the in-process TP=2 group's logits.
// Written without access to a multi-GPU machine: not yet run.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/tp/host_comm.h"
#include "cuda/tp/nccl_comm.h"
#include "cuda/tp/tp_process.h"
#include "runtime/model/safetensors.h"
#include "runtime/teacher_forcing.h"
#include "runtime/tp/tp_group.h"
#include "runtime/tp/tp_link.h"
#include "tests/runtime/sparsity_test_util.h"

namespace strata {
namespace {

int gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
#define REQUIRE_TWO_GPUS() \
  if (gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus() << " visible"

TEST(GpuTp, NcclAllReduceAndAllGather) {
  REQUIRE_TWO_GPUS();
  const auto id = cuda::tp::make_unique_id();
  constexpr std::size_t n = 1000;
  std::vector<std::vector<float>> reduced(2), gathered(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      try {
        cuda::tp::NcclComm comm(id, r, 2, r, std::chrono::seconds(60));
        cudaStream_t s;
        CUDA_CHECK(cudaStreamCreate(&s));
        std::vector<std::uint16_t> h(n);
        for (std::size_t i = 0; i < n; ++i) h[i] = float_to_bf16(static_cast<float>(i % 7 + r));
        cuda::DeviceArray<__nv_bfloat16> d(n);
        CUDA_CHECK(cudaMemcpy(d.get(), h.data(), n * 2, cudaMemcpyHostToDevice));
        comm.all_reduce_bf16(d.get(), n, s);
        std::vector<float> mine(n, static_cast<float>(10 + r));
        cuda::DeviceArray<float> dm(n), dall(2 * n);
        CUDA_CHECK(cudaMemcpy(dm.get(), mine.data(), n * 4, cudaMemcpyHostToDevice));
        comm.all_gather_f32(dm.get(), dall.get(), n, s);
        comm.wait(s, std::chrono::seconds(60));
        CUDA_CHECK(cudaMemcpy(h.data(), d.get(), n * 2, cudaMemcpyDeviceToHost));
        for (auto v : h) reduced[r].push_back(bf16_to_float(v));
        gathered[r].resize(2 * n);
        CUDA_CHECK(cudaMemcpy(gathered[r].data(), dall.get(), 2 * n * 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaStreamDestroy(s));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(reduced[r][i], static_cast<float>(2 * (i % 7) + 1)) << i;
      ASSERT_EQ(gathered[r][i], 10.0f);
      ASSERT_EQ(gathered[r][n + i], 11.0f);
    }
  }
}

Config tp_config(const std::string& path, int tp) {
  Config c;
  c.model.path = path;
  c.model.seed = 7;
  c.model.max_model_len = 4096;
  c.cache.kv_bytes = 1ull << 30;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 512;
  c.backend.tp_size = tp;
  return c;
}

std::unique_ptr<Backend> group(const Config& c) {
  return make_tp_group(cuda::make_cuda_backends(c));
}

// Worst per-row relative L2 distance of b from a ([rows][V]).
double worst_rel_l2(const std::vector<float>& a, const std::vector<float>& b, int V) {
  double worst = 0;
  for (std::size_t r = 0; r < a.size() / V; ++r) {
    double num = 0, den = 0;
    for (int j = 0; j < V; ++j) {
      const double x = a[r * V + j], y = b[r * V + j];
      num += (x - y) * (x - y);
      den += x * x;
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
  }
  return worst;
}

std::vector<std::int32_t> test_ids(int n, int V) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7919) % V);
  return ids;
}

SparsityProfile snapkv32() {
  return test::sparse_profile(Policy::kSnapKv, 1, 32, 8, 4);
}

// Runs on a single GPU: the sharded path of cuda_backend.cpp (local heads, sliced weights,
// all-reduce points, vocabulary gather) without NCCL.
TEST(GpuTp, HostStagedTp2OnOneGpuEqualsTp1) {
  if (gpus() < 1) GTEST_FAIL() << "no CUDA device";
  setenv("STRATA_GEMM_AUTOTUNE", "0", 1);  // start-up speed; cuBLAS defaults on both sides
  // random:tiny at its former CUDA vocabulary (528): with the shared parser's 684 (issue 15) the
  // test's ids change and snapkv's selection on this 2-KV-head model flips enough slots to read
  // 0.123 (dense 0.0103); commit 0981c5b, before the split, reads exactly the same figures at
  // vocab=684 (docs/gpu-validation.md 2026-12-01), so it is the fixture, not the split.
  for (const std::string path : {"random:tiny,vocab=528", "random:llama3-8b,layers=2"}) {
    Config c1 = tp_config(path, 1);
    c1.backend.cuda_graphs = false;
    auto one = group(c1);
    Config c2 = c1;
    c2.backend.tp_size = 2;
    auto comm = std::make_shared<cpu::TpComm>(2, std::chrono::seconds(60));
    cuda::tp::HostComm h0(comm, 0), h1(comm, 1);
    std::vector<std::unique_ptr<Backend>> ranks;
    ranks.push_back(std::make_unique<cuda::CudaBackend>(c2, 0, cuda::CudaTpRank{0, 2, &h0}));
    ranks.push_back(std::make_unique<cuda::CudaBackend>(c2, 0, cuda::CudaTpRank{1, 2, &h1}));
    EXPECT_EQ(ranks[1]->info().tp_size, 2);
    EXPECT_EQ(ranks[1]->info().layout.kv_heads, one->info().layout.kv_heads / 2);
    EXPECT_EQ(ranks[1]->model().num_key_value_heads, one->model().num_key_value_heads);
    auto two = make_tp_group(std::move(ranks));
    const int V = one->model().vocab_size;
    const auto ids = test_ids(80, V);
    for (bool sparse : {false, true}) {
      const SparsityProfile prof = sparse ? snapkv32() : SparsityProfile{};
      const auto a = teacher_forced_logits(*one, ids, prof, 48);
      const auto b = teacher_forced_logits(*two, ids, prof, 48);
      ASSERT_EQ(a.size(), b.size());
      const double e = worst_rel_l2(a, b, V);
      std::printf("%s host-staged tp2 vs tp1 (%s): worst row rel L2 %.3g\n", path.c_str(),
                  sparse ? "snapkv" : "dense", e);
      // Issue 10's bound is "the bf16 bound" of the CUDA forward issue: 3e-2 rel L2. TP=2
      // rounds the O/down partial sums differently; snapkv's selection turns that into a
      // few different kept slots (measured 2026-11-29: dense 9.5e-3 / 5.4e-3, snapkv 2.6e-2
      // on the 8B-width 2-layer model).
      EXPECT_LE(e, 3e-2) << path << (sparse ? " sparse" : " dense");
    }
  }
}

TEST(GpuTp, Tp2LogitsEqualTp1Llama8BShape) {
  REQUIRE_TWO_GPUS();
  const std::string path = "random:llama3-8b,layers=4";
  auto one = group(tp_config(path, 1));
  auto two = group(tp_config(path, 2));
  ASSERT_EQ(two->info().tp_size, 2);
  EXPECT_EQ(two->info().layout.kv_heads, one->info().layout.kv_heads / 2);
  const int V = one->model().vocab_size;
  std::vector<std::int32_t> ids(96);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7919) % V);
  for (bool sparse : {false, true}) {
    const SparsityProfile prof = sparse ? snapkv32() : SparsityProfile{};
    // Prefill 64, then 32 teacher-forced decodes (graphs; sparse KV when sparse).
    const auto a = teacher_forced_logits(*one, ids, prof, 64);
    const auto b = teacher_forced_logits(*two, ids, prof, 64);
    ASSERT_EQ(a.size(), b.size());
    const double e = worst_rel_l2(a, b, V);
    std::printf("tp2 vs tp1 (%s): worst row rel L2 %.3g\n", sparse ? "snapkv" : "dense", e);
    EXPECT_LE(e, 2e-2) << (sparse ? "sparse" : "dense");  // bf16 bound (GpuModel uses 3e-2 vs fp64)
  }
}

TEST(GpuTp, Llama70BShapeBuildsShardedAndSteps) {
  REQUIRE_TWO_GPUS();
  auto two = group(tp_config("random:llama3-70b,layers=8", 2));
  EXPECT_EQ(two->model().num_key_value_heads, 8);
  EXPECT_EQ(two->info().layout.kv_heads, 4);
  std::vector<std::int32_t> ids(40);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(i * 31 + 5);
  const auto l = teacher_forced_logits(*two, ids, SparsityProfile{}, 32);
  ASSERT_EQ(l.size(), ids.size() * static_cast<std::size_t>(two->model().vocab_size));
  for (float x : l) ASSERT_TRUE(std::isfinite(x));
}

// The separate-process path with threads as processes: rank 0 (its CUDA rank backend on GPU 0
// plus a proxy) and a follower (rank links over TCP on 127.0.0.1, its own NCCL communicator on
// GPU 1, run_cuda_tp_follower) give the in-process TP=2 group's teacher-forced logits (same
// shards, same NCCL collectives), dense and snapkv; destroying rank 0's backends stops the
// follower with exit code 0.
TEST(GpuTp, ProxiedFollowerEqualsInProcessGroup) {
  REQUIRE_TWO_GPUS();
  using namespace std::chrono_literals;
  const Config c = tp_config("random:llama3-8b,layers=2", 2);
  const auto id = cuda::tp::make_unique_id();
  std::promise<std::uint16_t> port;
  auto port_f = port.get_future();
  auto zero = std::async(std::launch::async, [&] {
    const auto mesh =
        tp_mesh_accept({"127.0.0.1", 0}, 2, 60s, [&](std::uint16_t p) { port.set_value(p); });
    return make_tp_group(cuda::tp::make_cuda_tp_process_backends(mesh, id, c, 60s));
  });
  auto follower = std::async(std::launch::async, [&] {
    if (port_f.wait_for(60s) != std::future_status::ready) return -1;  // rank 0 never listened
    const auto mesh = tp_mesh_connect({"127.0.0.1", port_f.get()}, 1, 2, 60s);
    return cuda::tp::run_cuda_tp_follower(mesh, id, c, 60s);
  });
  auto remote = zero.get();
  auto local = group(c);
  const int V = local->model().vocab_size;
  const auto ids = test_ids(96, V);
  for (bool sparse : {false, true}) {
    const SparsityProfile prof = sparse ? snapkv32() : SparsityProfile{};
    const auto a = teacher_forced_logits(*local, ids, prof, 64);
    const auto b = teacher_forced_logits(*remote, ids, prof, 64);
    ASSERT_EQ(a.size(), b.size());
    const double e = worst_rel_l2(a, b, V);
    const bool same = std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    std::printf("FIGURE tp_proxied_vs_in_process_%s_rel_l2 %.6g\n", sparse ? "snapkv" : "dense", e);
    std::printf("proxied follower vs in-process tp2 (%s): worst row rel L2 %.3g, bitwise %s\n",
                sparse ? "snapkv" : "dense", e, same ? "equal" : "different");
    EXPECT_LE(e, 2e-2) << (sparse ? "sparse" : "dense");
  }
  remote.reset();  // the proxy sends the stop
  ASSERT_EQ(follower.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(follower.get(), 0);
}

}  // namespace
}  // namespace strata
