// The wire format between the processes of a tensor-parallel group (docs/tensor-parallel.md,
// "Separate processes"): what rank 0 sends a follower rank each step (the StepPlan) and what
// the follower answers. Plain bytes, little-endian, no alignment; the host byte order is
// assumed little-endian (x86-64, aarch64), which the encoder checks at compile time.
//
// A follower rank never samples (rank 0 does), so the sampling inputs of a SeqStep (params,
// prompt, output: pointers into rank 0's engine) are not sent. Only whether rank 0 had them
// travels, so the plan's preconditions are checked identically on every rank: a decoded
// sampled step points at placeholders owned by the WirePlan, which no rank > 0 reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/step_plan.h"

namespace strata {

// A decoded plan plus the placeholders its sampled SeqSteps point to. Not copyable or
// movable: the plan points into the object itself.
struct WirePlan {
  WirePlan() = default;
  WirePlan(const WirePlan&) = delete;
  WirePlan& operator=(const WirePlan&) = delete;
  StepPlan plan;
  // Greedy, so a rank > 0 that samples anyway (the CUDA backend: every rank holds the whole
  // logits) takes its cheapest path; its tokens are never used.
  SamplingParams placeholder_params = [] {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }();
  std::vector<std::int32_t> placeholder_tokens;
};

std::vector<std::uint8_t> encode_plan(const StepPlan& plan);
// Throws InternalError when the bytes are not a whole plan (truncated, trailing bytes,
// counts beyond the buffer). `out` must be fresh.
void decode_plan(const std::uint8_t* data, std::size_t size, WirePlan& out);

// A follower's answer to one plan: ok, or the error its step threw (and whether the rank's
// communicator failed with it: rank 0 then aborts its own). On the wire ok and group_failed
// share one byte: 1 ok, 0 failed, 2 failed and the group with it.
struct WireReply {
  std::uint64_t step_id = 0;
  bool ok = true;
  std::string error;
  bool group_failed = false;
  double device_ms = 0;
};
std::vector<std::uint8_t> encode_reply(const WireReply& r);
WireReply decode_reply(const std::uint8_t* data, std::size_t size);

// Little-endian writer / bounds-checked reader shared by the messages of runtime/tp/tp_link.h.
class WireWriter {
 public:
  void u8(std::uint8_t v) { out_.push_back(v); }
  void u32(std::uint32_t v);
  void u64(std::uint64_t v);
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void f64(double v);
  void ints(const std::vector<std::int32_t>& v);
  void str(const std::string& s);
  std::vector<std::uint8_t> take() { return std::move(out_); }

 private:
  std::vector<std::uint8_t> out_;
};

class WireReader {
 public:
  WireReader(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}
  std::uint8_t u8();
  std::uint32_t u32();
  std::uint64_t u64();
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  double f64();
  std::vector<std::int32_t> ints();
  std::string str();
  // Throws unless every byte was read.
  void finish() const;

 private:
  const std::uint8_t* need(std::size_t n);
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

}  // namespace strata
