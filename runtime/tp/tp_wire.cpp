#include "runtime/tp/tp_wire.h"

#include <bit>
#include <cstring>

#include "runtime/error.h"

namespace strata {

static_assert(std::endian::native == std::endian::little,
              "the tensor-parallel wire format sends host-order (little-endian) values");

namespace {

constexpr std::uint32_t kPlanMagic = 0x4e4c5053;   // "SPLN"
constexpr std::uint32_t kReplyMagic = 0x50455253;  // "SREP"

enum SeqFlags : std::uint8_t {
  kPrefill = 1,
  kSample = 2,
  kReturnLogits = 4,
  kSamplingInputs = 8,  // rank 0 had params and output (prompt is optional)
};

}  // namespace

void WireWriter::u32(std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void WireWriter::u64(std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void WireWriter::f64(double v) {
  u64(std::bit_cast<std::uint64_t>(v));
}
void WireWriter::ints(const std::vector<std::int32_t>& v) {
  u32(static_cast<std::uint32_t>(v.size()));
  const auto at = out_.size();
  out_.resize(at + v.size() * 4);
  if (!v.empty()) std::memcpy(out_.data() + at, v.data(), v.size() * 4);
}
void WireWriter::str(const std::string& s) {
  u32(static_cast<std::uint32_t>(s.size()));
  out_.insert(out_.end(), s.begin(), s.end());
}

const std::uint8_t* WireReader::need(std::size_t n) {
  if (static_cast<std::size_t>(end_ - p_) < n)
    throw InternalError("tensor-parallel wire: message truncated (" + std::to_string(n) +
                        " bytes wanted, " + std::to_string(end_ - p_) + " left)");
  const auto* p = p_;
  p_ += n;
  return p;
}
std::uint8_t WireReader::u8() {
  return *need(1);
}
std::uint32_t WireReader::u32() {
  const auto* p = need(4);
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}
std::uint64_t WireReader::u64() {
  const auto* p = need(8);
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}
double WireReader::f64() {
  return std::bit_cast<double>(u64());
}
std::vector<std::int32_t> WireReader::ints() {
  const std::size_t n = u32();
  const auto* p = need(n * 4);  // checked before allocating
  std::vector<std::int32_t> v(n);
  if (n) std::memcpy(v.data(), p, n * 4);
  return v;
}
std::string WireReader::str() {
  const std::size_t n = u32();
  const auto* p = need(n);
  return std::string(reinterpret_cast<const char*>(p), n);
}
void WireReader::finish() const {
  if (p_ != end_)
    throw InternalError("tensor-parallel wire: " + std::to_string(end_ - p_) +
                        " trailing bytes after a message");
}

std::vector<std::uint8_t> encode_plan(const StepPlan& plan) {
  WireWriter w;
  w.u32(kPlanMagic);
  w.u64(plan.step_id);
  w.u32(static_cast<std::uint32_t>(plan.seqs.size()));
  for (const auto& s : plan.seqs) {
    w.u64(s.seq_id);
    w.ints(s.tokens);
    w.i32(s.start);
    w.i32(s.prompt_len);
    std::uint8_t f = 0;
    if (s.prefill) f |= kPrefill;
    if (s.sample) f |= kSample;
    if (s.return_logits) f |= kReturnLogits;
    if (s.params && s.output) f |= kSamplingInputs;
    w.u8(f);
    w.u32(static_cast<std::uint32_t>(s.layers.size()));
    for (const auto& l : s.layers) {
      w.u8(static_cast<std::uint8_t>(l.rule.policy));
      w.i32(l.rule.capacity);
      w.i32(l.rule.ring);
      w.i32(l.rule.sinks);
      w.i32(l.rule.window);
      w.u8(static_cast<std::uint8_t>(l.rule.pool));
      w.i32(l.rule.pool_kernel);
      w.i32(l.valid);
      w.i32(l.ring_pos);
      w.ints(l.pages);
      w.ints(l.temp_pages);
      w.u8(static_cast<std::uint8_t>(l.action));
      w.i32(l.shrink_to);
    }
  }
  w.ints(plan.released_pages);
  return w.take();
}

void decode_plan(const std::uint8_t* data, std::size_t size, WirePlan& out) {
  WireReader r(data, size);
  if (r.u32() != kPlanMagic) throw InternalError("tensor-parallel wire: not a step plan");
  auto& plan = out.plan;
  plan.step_id = r.u64();
  const std::size_t n = r.u32();
  if (n > size)
    throw InternalError("tensor-parallel wire: plan claims " + std::to_string(n) + " seqs");
  plan.seqs.resize(n);
  for (auto& s : plan.seqs) {
    s.seq_id = r.u64();
    s.tokens = r.ints();
    s.start = r.i32();
    s.prompt_len = r.i32();
    const auto f = r.u8();
    s.prefill = f & kPrefill;
    s.sample = f & kSample;
    s.return_logits = f & kReturnLogits;
    if (s.sample && (f & kSamplingInputs)) {
      s.params = &out.placeholder_params;
      s.prompt = &out.placeholder_tokens;
      s.output = &out.placeholder_tokens;
    }
    const std::size_t nl = r.u32();
    if (nl > size)
      throw InternalError("tensor-parallel wire: plan claims " + std::to_string(nl) + " layers");
    s.layers.resize(nl);
    for (auto& l : s.layers) {
      const auto policy = r.u8();
      if (policy > static_cast<std::uint8_t>(Policy::kScored))
        throw InternalError("tensor-parallel wire: policy " + std::to_string(policy));
      l.rule.policy = static_cast<Policy>(policy);
      l.rule.capacity = r.i32();
      l.rule.ring = r.i32();
      l.rule.sinks = r.i32();
      l.rule.window = r.i32();
      const auto pool = r.u8();
      if (pool > static_cast<std::uint8_t>(PoolKind::kAvg))
        throw InternalError("tensor-parallel wire: pool kind " + std::to_string(pool));
      l.rule.pool = static_cast<PoolKind>(pool);
      l.rule.pool_kernel = r.i32();
      l.valid = r.i32();
      l.ring_pos = r.i32();
      l.pages = r.ints();
      l.temp_pages = r.ints();
      const auto action = r.u8();
      if (action > static_cast<std::uint8_t>(LayerAction::kShrink))
        throw InternalError("tensor-parallel wire: layer action " + std::to_string(action));
      l.action = static_cast<LayerAction>(action);
      l.shrink_to = r.i32();
    }
  }
  plan.released_pages = r.ints();
  r.finish();
}

std::vector<std::uint8_t> encode_reply(const WireReply& rep) {
  WireWriter w;
  w.u32(kReplyMagic);
  w.u64(rep.step_id);
  w.u8(rep.ok ? 1 : rep.group_failed ? 2 : 0);
  w.str(rep.error);
  w.f64(rep.device_ms);
  return w.take();
}

WireReply decode_reply(const std::uint8_t* data, std::size_t size) {
  WireReader r(data, size);
  if (r.u32() != kReplyMagic) throw InternalError("tensor-parallel wire: not a step reply");
  WireReply rep;
  rep.step_id = r.u64();
  const auto status = r.u8();
  if (status > 2) throw InternalError("tensor-parallel wire: bad reply status");
  rep.ok = status == 1;
  rep.group_failed = status == 2;
  rep.error = r.str();
  rep.device_ms = r.f64();
  r.finish();
  return rep;
}

}  // namespace strata
