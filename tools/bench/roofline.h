// Roofline floors for a model shape and a serving workload: prefill time from FLOPs at the
// GEMM ceiling, decode step time from bytes at the bandwidth ceiling (max with its FLOPs),
// the best closed-loop output throughput at each concurrency within a KV byte budget.
// Ceilings measured on the H200 (shared/GPU.md): 4.27 TB/s copy, 769 TFLOP/s bf16.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/model/model_config.h"
#include "runtime/sparsity_profile.h"

namespace strata::bench {

struct Ceilings {
  double bytes_per_s = 4.27e12;
  double flops_per_s = 769e12;
};

struct Workload {
  int input_tokens = 4000;
  int output_tokens = 500;
};

class Roofline {
 public:
  // `rules`: one per layer (SparsityProfile::resolve); empty = full cache everywhere.
  Roofline(const ModelConfig& model, std::vector<LayerRule> rules, Ceilings ceilings = {},
           int elem_bytes = 2);

  double weight_bytes_per_step() const;                    // weights read by one decode step
  double kv_bytes_per_token_layer() const;                 // K+V of one token in one layer
  double kept_kv_bytes(int context, int generated) const;  // one sequence, all layers
  double full_kv_bytes(int context) const;
  double prefill_flops(int tokens) const;  // one prompt, causal attention included
  double prefill_floor_s(int tokens) const;
  // One decode step over `batch` sequences at `context` tokens (of which `generated` decoded).
  double decode_step_floor_s(int batch, int context, int generated) const;
  // Largest number of sequences whose peak KV fits `kv_budget_bytes` (0 = unbounded).
  int max_sequences(double kv_budget_bytes, const Workload& w) const;
  // Best closed-loop output tokens/s with `concurrency` requests in flight (prefill and
  // decode serialised, contexts averaged over the generation), within the KV budget.
  double best_output_throughput(int concurrency, const Workload& w, double kv_budget_bytes) const;

 private:
  ModelConfig m_;
  std::vector<LayerRule> rules_;
  Ceilings c_;
  int eb_;
};

}  // namespace strata::bench
