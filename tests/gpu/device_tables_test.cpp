// Page tables resident on the device (backend.device_tables, issue 24 item 2;
// docs/cuda-backend.md "Page tables on the device"), on the GPU:
//  - the delta kernel (cuda/table_ops.h) applied to a device store gives exactly the host's
//    application of the same ops, step after step, over the randomized manager-driven plans of
//    tests/cuda/table_workload.h (several rounds per step);
//  - a model run with resident tables computes the same bits (sampled tokens, logprobs, argmax,
//    returned logits) as one that uploads whole tables every step, over the same plans (sparse
//    profile with live shrinks, selection, preemption, dropped steps, shuffled plan order; the
//    full cache), graphs on; both backends' table bytes per step are printed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/step_layout.h"
#include "cuda/table_ops.h"
#include "cuda/testing/backend_probe.h"
#include "runtime/config.h"
#include "runtime/kv_layout.h"
#include "tests/cuda/table_workload.h"
#include "tests/gpu/gpu_test_util.h"

namespace strata::gputest {
namespace {

using cuda::CudaBackend;
using cuda::CudaBackendProbe;

TEST(GpuDeviceTables, OpsKernelEqualsHostApplication) {
  REQUIRE_GPU();
  testutil::WorkloadShape sh;
  sh.max_seqs = 16;
  sh.max_tokens = 512;
  testutil::TableWorkload w(3, sh);
  cuda::StepLimits lim = testutil::step_limits_for(sh);
  lim.table_delta_entries = 2 * lim.max_table_pages;  // several rounds on busy steps
  cuda::StepPlanner planner(lim);
  const cuda::StepImageLayout at = cuda::StepImageLayout::for_limits(lim);
  std::vector<std::byte> mem(at.bytes);
  const cuda::StepImage image(std::span<std::byte>(mem.data(), mem.size()), at);
  cuda::StepLayout layout;
  const std::size_t entries =
      cuda::TableStore::max_data(lim.max_seqs, lim.num_layers, lim.max_table_pages);
  std::vector<int> host(entries, 0);
  DeviceArray<int> store(entries);
  CUDA_CHECK(cudaMemset(store.get(), 0, store.bytes()));
  DeviceArray<cuda::TableOp> ops(cuda::TableStore::max_ops(lim.max_seqs, lim.num_layers));
  DeviceArray<int> data(static_cast<std::size_t>(lim.table_delta_entries));
  long rounds = 0, copies = 0;
  for (int n = 0; n < 400 && !HasFailure(); ++n) {
    const StepPlan& plan = w.next();
    planner.build(plan, cuda::StepOptions{.device_tables = true}, image, layout);
    for (const cuda::TableRound& r : layout.table_rounds) {
      CUDA_CHECK(cudaMemcpy(ops.get(), image.table_ops() + r.first_op,
                            static_cast<std::size_t>(r.num_ops) * sizeof(cuda::TableOp),
                            cudaMemcpyHostToDevice));
      if (r.num_data > 0)
        CUDA_CHECK(cudaMemcpy(data.get(), image.tables() + r.first_data,
                              static_cast<std::size_t>(r.num_data) * sizeof(int),
                              cudaMemcpyHostToDevice));
      CUDA_CHECK(cuda::launch_table_ops({.store = store.get(),
                                         .ops = ops.get(),
                                         .num_ops = r.num_ops,
                                         .data = data.get(),
                                         .data_base = r.first_data},
                                        nullptr));
      ++rounds;
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    // The host, op by op in order (the ops are order-free: tests/cuda/table_store_test.cpp).
    std::vector<int> before = host;
    for (int o = 0; o < layout.table_ops; ++o) {
      const cuda::TableOp& op = image.table_ops()[o];
      copies += op.kind == cuda::kTableCopy;
      for (int e = 0; e < op.count; ++e)
        host[static_cast<std::size_t>(op.dst + e)] =
            op.kind == cuda::kTableWrite  ? image.tables()[op.arg + e]
            : op.kind == cuda::kTableCopy ? before[static_cast<std::size_t>(op.arg + e)]
                                          : op.arg;
    }
    const std::vector<int> got = to_host(store);
    ASSERT_EQ(got, host) << "step " << n;
    w.ran();
  }
  EXPECT_GT(rounds, 400);
  EXPECT_GT(copies, 0);
}

std::unique_ptr<CudaBackend> backend(bool device_tables) {
  Config c;
  c.model.path = "random:tiny";
  c.model.seed = 3;
  c.model.max_model_len = 2048;
  c.cache.kv_bytes = 256ull << 20;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 512;
  c.backend.device_tables = device_tables;
  return std::make_unique<CudaBackend>(c, 0);
}

void same_bits(const StepResult& a, const StepResult& b, const std::string& where) {
  ASSERT_EQ(a.seqs.size(), b.seqs.size()) << where;
  for (std::size_t i = 0; i < a.seqs.size(); ++i) {
    const SeqResult& x = a.seqs[i];
    const SeqResult& y = b.seqs[i];
    const std::string at = where + " seq " + std::to_string(x.seq_id);
    EXPECT_EQ(x.token, y.token) << at;
    EXPECT_EQ(x.argmax, y.argmax) << at;
    EXPECT_EQ(std::memcmp(&x.logprob, &y.logprob, sizeof(float)), 0)
        << at << ": logprob " << x.logprob << " vs " << y.logprob;
    ASSERT_EQ(x.logits.size(), y.logits.size()) << at;
    EXPECT_EQ(std::memcmp(x.logits.data(), y.logits.data(), x.logits.size() * sizeof(float)), 0)
        << at << ": logits differ";
  }
}

void run_both(bool sparse, std::uint64_t seed) {
  auto dev = backend(true), whole = backend(false);
  const ModelConfig& mc = dev->model();
  testutil::WorkloadShape sh;
  sh.layers = mc.num_hidden_layers;
  sh.vocab = mc.vocab_size;
  sh.kv_heads = mc.num_key_value_heads;
  sh.head_dim = mc.head_dim;
  sh.pages = std::min(dev->info().num_pages, sparse ? 400 : 250);
  sh.sparse = sparse;
  testutil::TableWorkload w(seed, sh);
  std::int64_t dev_bytes = 0, whole_bytes = 0;
  long graph_steps = 0;
  const int kSteps = 400;
  for (int n = 0; n < kSteps && !::testing::Test::HasFailure(); ++n) {
    StepPlan plan = w.next();  // (a copy: some steps return every position's logits)
    if (n % 10 == 7)
      for (SeqStep& s : plan.seqs) s.return_logits = true;
    const StepResult a = dev->step(plan);
    const StepResult b = whole->step(plan);
    same_bits(a, b, std::string(sparse ? "sparse" : "full") + " step " + std::to_string(n));
    dev_bytes += a.stats.table_bytes;
    whole_bytes += b.stats.table_bytes;
    w.ran();
  }
  graph_steps = CudaBackendProbe(*dev).graphs_captured();
  const auto& c = w.c;
  std::printf(
      "%s: %ld steps (%ld dropped), preempted %ld, finished %ld, shrinks %ld, selects %ld, "
      "shuffled %ld; graphs captured %ld; table bytes/step: resident %.0f, whole %.0f\n",
      sparse ? "sparse" : "full", c.steps, c.dropped, c.preempted, c.finished, c.shrinks, c.selects,
      c.shuffled, graph_steps, static_cast<double>(dev_bytes) / kSteps,
      static_cast<double>(whole_bytes) / kSteps);
  EXPECT_GT(graph_steps, 0);
}

TEST(GpuDeviceTables, ResidentTablesEqualWholeTablesBitwiseSparse) {
  REQUIRE_GPU();
  run_both(true, 21);
}

TEST(GpuDeviceTables, ResidentTablesEqualWholeTablesBitwiseFull) {
  REQUIRE_GPU();
  run_both(false, 22);
}

}  // namespace
}  // namespace strata::gputest
