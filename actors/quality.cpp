#include "actors/quality.h"

#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "runtime/sampler.h"

namespace strata {

namespace {
constexpr double kZ = 1.96;  // 95 %

Interval clip(Interval i) {
  return {std::clamp(i.lo, 0.0, 1.0), std::clamp(i.hi, 0.0, 1.0)};
}
}  // namespace

const std::vector<std::string>& quality_buckets() {
  static const std::vector<std::string> b{"0-255", "256-1023", "1024-4095", "4096-16383", "16384+"};
  return b;
}

const char* quality_bucket(int prompt_len) {
  const auto& b = quality_buckets();
  if (prompt_len < 256) return b[0].c_str();
  if (prompt_len < 1024) return b[1].c_str();
  if (prompt_len < 4096) return b[2].c_str();
  if (prompt_len < 16384) return b[3].c_str();
  return b[4].c_str();
}

std::vector<std::int32_t> ReplayRecord::replay_tokens() const {
  std::vector<std::int32_t> t(prompt);
  if (output.size() > 1) t.insert(t.end(), output.begin(), output.end() - 1);
  return t;
}

void score_replay_rows(const ReplayRecord& rec, int first_pos, std::span<float> logits, int vocab,
                       ReplayScore& score) {
  STRATA_CHECK(vocab > 0 && logits.size() % static_cast<std::size_t>(vocab) == 0,
               "score_replay_rows: logits are not whole rows");
  const int rows = static_cast<int>(logits.size() / static_cast<std::size_t>(vocab));
  const int n = static_cast<int>(rec.output.size());
  for (int r = 0; r < rows && score.positions < n; ++r) {
    const int k = first_pos + r - rec.first_scored();  // output index this row predicts
    if (k != score.positions) continue;                // before the next unscored one
    auto row = logits.subspan(static_cast<std::size_t>(r) * static_cast<std::size_t>(vocab),
                              static_cast<std::size_t>(vocab));
    const auto ks = static_cast<std::size_t>(k);
    const RowScore s =
        score_row(row, rec.params, rec.prompt, score.history, rec.eos_ids, rec.output[ks]);
    if (s.argmax == rec.argmax[ks]) ++score.agree;
    const double d = s.logprob - static_cast<double>(rec.logprob[ks]);
    score.delta_sum += d;
    score.delta_sq += d * d;
    score.history.push_back(rec.output[ks]);
    ++score.positions;
  }
}

Interval wilson_interval(double k, double n, double z) {
  if (n <= 0) return {0.0, 1.0};
  const double p = k / n, z2 = z * z;
  const double centre = (p + z2 / (2 * n)) / (1 + z2 / n);
  const double half = z * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n);
  return clip({centre - half, centre + half});
}

void QualityCell::add(const ReplayScore& s) {
  const double a = s.agree, n = s.positions, d = s.delta_sum;
  ++samples;
  positions += static_cast<std::uint64_t>(s.positions);
  agree += static_cast<std::uint64_t>(s.agree);
  delta_sum += d;
  delta_sq += s.delta_sq;
  s_aa += a * a;
  s_an += a * n;
  s_nn += n * n;
  s_dd += d * d;
  s_dn += d * n;
}

void QualityCell::merge(const QualityCell& o) {
  samples += o.samples;
  positions += o.positions;
  agree += o.agree;
  delta_sum += o.delta_sum;
  delta_sq += o.delta_sq;
  s_aa += o.s_aa;
  s_an += o.s_an;
  s_nn += o.s_nn;
  s_dd += o.s_dd;
  s_dn += o.s_dn;
}

double QualityCell::agreement() const {
  return positions == 0 ? 1.0 : static_cast<double>(agree) / static_cast<double>(positions);
}

double QualityCell::delta_mean() const {
  return positions == 0 ? 0.0 : delta_sum / static_cast<double>(positions);
}

Interval QualityCell::agreement_interval() const {
  const double N = static_cast<double>(positions);
  Interval w = wilson_interval(static_cast<double>(agree), N);
  if (samples < 2 || N <= 0) return w;
  // Ratio estimator p = sum a / sum n over k samples: var = k/(k-1) sum (a - p n)^2 / N^2.
  const double p = agreement(), k = static_cast<double>(samples);
  const double ss = std::max(0.0, s_aa - 2 * p * s_an + p * p * s_nn);
  const double se = std::sqrt(k / (k - 1) * ss) / N;
  return clip({std::min(w.lo, p - kZ * se), std::max(w.hi, p + kZ * se)});
}

Interval QualityCell::delta_interval() const {
  const double N = static_cast<double>(positions), m = delta_mean();
  if (N <= 0) return {0.0, 0.0};
  double se = 0.0;
  if (samples >= 2) {
    const double k = static_cast<double>(samples);
    const double ss = std::max(0.0, s_dd - 2 * m * s_dn + m * m * s_nn);
    se = std::sqrt(k / (k - 1) * ss) / N;
  } else if (N >= 2) {
    const double var = std::max(0.0, (delta_sq - N * m * m) / (N - 1));
    se = std::sqrt(var / N);
  }
  return {m - kZ * se, m + kZ * se};
}

QualityCell QualityReport::version_total(std::uint64_t version) const {
  QualityCell t;
  t.version = version;
  t.bucket = "all";
  for (const auto& c : cells)
    if (c.version == version) t.merge(c);
  return t;
}

std::vector<std::uint64_t> QualityReport::versions() const {
  std::vector<std::uint64_t> v;
  for (const auto& c : cells)
    if (v.empty() || v.back() != c.version) v.push_back(c.version);
  return v;
}

void add_replay(QualityReport& report, const ReplayRecord& rec, const ReplayScore& score) {
  const std::string bucket = quality_bucket(static_cast<int>(rec.prompt.size()));
  const auto& order = quality_buckets();
  auto rank = [&](const std::string& b) { return std::find(order.begin(), order.end(), b); };
  auto it = std::find_if(report.cells.begin(), report.cells.end(), [&](const QualityCell& c) {
    return c.version == rec.profile_version && c.bucket == bucket;
  });
  if (it == report.cells.end()) {
    QualityCell c;
    c.version = rec.profile_version;
    c.bucket = bucket;
    it = report.cells.insert(std::upper_bound(report.cells.begin(), report.cells.end(), c,
                                              [&](const QualityCell& a, const QualityCell& b) {
                                                return a.version != b.version
                                                           ? a.version < b.version
                                                           : rank(a.bucket) < rank(b.bucket);
                                              }),
                             c);
  }
  it->add(score);
  ++report.replays_completed;
}

bool alert_tripped(const QualityReport& report, std::uint64_t version) {
  if (report.alert_below <= 0) return false;
  const QualityCell t = report.version_total(version);
  return t.samples >= static_cast<std::uint64_t>(std::max(1, report.alert_min_samples)) &&
         t.agreement_interval().hi < report.alert_below;
}

}  // namespace strata
