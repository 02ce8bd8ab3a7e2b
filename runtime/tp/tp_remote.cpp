#include "runtime/tp/tp_remote.h"

#include <atomic>
#include <cstdio>
#include <thread>

#include "runtime/error.h"
#include "runtime/tp/tp_wire.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kGrace = std::chrono::seconds(10);

class RemoteRank final : public Backend {
 public:
  RemoteRank(int rank, std::shared_ptr<TpLink> control, BackendInfo info, ModelConfig model,
             std::function<void(const std::string&)> abort_group,
             std::function<bool()> group_aborted)
      : rank_(rank),
        control_(std::move(control)),
        info_(std::move(info)),
        model_(std::move(model)),
        abort_group_(std::move(abort_group)),
        group_aborted_(std::move(group_aborted)) {}

  ~RemoteRank() override {
    if (dead_) return;
    try {
      control_->send(TpMsg::kStop, nullptr, 0);
    } catch (const std::exception&) {
    }
  }

  const BackendInfo& info() const override { return info_; }
  const ModelConfig& model() const override { return model_; }

  StepResult step(const StepPlan& plan) override {
    const std::string who = "rank " + std::to_string(rank_) + " (separate process)";
    if (dead_) throw InternalError(who + ": " + dead_reason_);
    try {
      control_->send(TpMsg::kPlan, encode_plan(plan));
    } catch (const std::exception& e) {
      die(who + " cannot be sent step " + std::to_string(plan.step_id) + ": " + e.what());
    }
    TpMessage m;
    auto st = control_->recv(m, Clock::time_point::max(), group_aborted_);
    if (st == TpLink::Recv::kStopped) {
      // The group failed: tell the rank (a CUDA rank's NCCL wait would otherwise last until
      // its timeout; a CPU rank's collective has failed already), then wait for its answer.
      try {
        control_->send(TpMsg::kAbort, nullptr, 0);
      } catch (const std::exception&) {
      }
      st = control_->recv(m, Clock::now() + kGrace);
    }
    if (st == TpLink::Recv::kTimeout || st == TpLink::Recv::kStopped)
      die(who + " did not answer step " + std::to_string(plan.step_id) + " within " +
          std::to_string(kGrace.count()) + " s after the group failed");
    if (st == TpLink::Recv::kClosed)
      die(who + " closed its connection during step " + std::to_string(plan.step_id) + " (" +
          control_->error() + ")");
    if (m.type != TpMsg::kReply) die(who + " sent an unexpected message instead of a reply");
    WireReply rep;
    try {
      rep = decode_reply(m.body.data(), m.body.size());
    } catch (const std::exception& e) {
      die(who + ": " + e.what());
    }
    if (rep.step_id != plan.step_id)
      die(who + " answered step " + std::to_string(rep.step_id) + " instead of " +
          std::to_string(plan.step_id));
    // A failed step leaves the rank in sync (the next plan works, as with in-process ranks);
    // a failure inside a collective has aborted the group through the data links already.
    if (!rep.ok && rep.group_failed)  // its communicator failed: rank 0's waits must end too
      die(who + " failed step " + std::to_string(plan.step_id) + ": " + rep.error);
    if (!rep.ok)
      throw InternalError(who + " failed step " + std::to_string(plan.step_id) + ": " + rep.error);
    StepResult res;
    res.step_id = plan.step_id;
    res.seqs.resize(plan.seqs.size());
    for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
      res.seqs[i].seq_id = plan.seqs[i].seq_id;
      res.stats.tokens += static_cast<std::int64_t>(plan.seqs[i].tokens.size());
    }
    res.stats.device_ms = rep.device_ms;
    return res;
  }

 private:
  [[noreturn]] void die(const std::string& why) {
    dead_ = true;
    dead_reason_ = why;
    if (abort_group_) abort_group_(why);
    throw InternalError(why);
  }

  int rank_;
  std::shared_ptr<TpLink> control_;
  BackendInfo info_;
  ModelConfig model_;
  std::function<void(const std::string&)> abort_group_;
  std::function<bool()> group_aborted_;
  bool dead_ = false;
  std::string dead_reason_;
};

class WatchedRank final : public Backend {
 public:
  WatchedRank(std::unique_ptr<Backend> inner, TpLink& control,
              std::function<void(const std::string&)> abort)
      : inner_(std::move(inner)), control_(control), abort_(std::move(abort)) {
    watcher_ = std::thread([this] { watch(); });
  }
  ~WatchedRank() override {
    stop_ = true;
    watcher_.join();
  }
  const BackendInfo& info() const override { return inner_->info(); }
  const ModelConfig& model() const override { return inner_->model(); }
  StepResult step(const StepPlan& plan) override {
    ++gen_;  // odd: a step runs
    try {
      auto res = inner_->step(plan);
      ++gen_;
      return res;
    } catch (...) {
      ++gen_;
      throw;
    }
  }

 private:
  void watch() {
    std::uint64_t fired = 0;  // the generation already aborted
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      // Readable between two equal odd generations: it arrived during that one step (the next
      // plan comes only after the step's reply, and the generation changes before the reply).
      const auto g = gen_.load();
      if (g % 2 == 0 || g == fired || !control_.has_data() || gen_.load() != g) continue;
      fired = g;
      abort_("rank 0 aborted the group or went away during a step");
    }
  }

  std::unique_ptr<Backend> inner_;
  TpLink& control_;
  std::function<void(const std::string&)> abort_;
  std::atomic<std::uint64_t> gen_{0};
  std::atomic<bool> stop_{false};
  std::thread watcher_;
};

}  // namespace

std::unique_ptr<Backend> watch_tp_steps(std::unique_ptr<Backend> inner, TpLink& control,
                                        std::function<void(const std::string&)> abort) {
  return std::make_unique<WatchedRank>(std::move(inner), control, std::move(abort));
}

void tp_send_ready(TpLink& control, const Backend& backend) {
  WireWriter w;
  w.u8(1);
  const auto& i = backend.info();
  const auto& c = backend.model();
  w.i32(i.num_pages);
  w.u64(i.weight_bytes);
  w.i32(c.num_hidden_layers);
  w.i32(c.hidden_size);
  w.i32(c.vocab_size);
  w.i32(i.tp_size);
  control.send(TpMsg::kReady, w.take());
}

void tp_send_ready_error(TpLink& control, const std::string& why) {
  WireWriter w;
  w.u8(0);
  w.str(why);
  control.send(TpMsg::kReady, w.take());
}

std::unique_ptr<Backend> make_remote_rank(int rank, std::shared_ptr<TpLink> control,
                                          const Backend& local,
                                          std::function<void(const std::string&)> abort_group,
                                          std::function<bool()> group_aborted, bool equal_pages) {
  const std::string who = "rank " + std::to_string(rank);
  TpMessage m;
  const auto st = control->recv(m, Clock::time_point::max());
  if (st != TpLink::Recv::kOk)
    throw ConfigError("backend.tp_size",
                      who + " went away before its backend was ready (" + control->error() + ")");
  if (m.type != TpMsg::kReady) throw ConfigError("backend.tp_size", who + " is not a strata rank");
  WireReader r(m.body.data(), m.body.size());
  if (r.u8() == 0) throw ConfigError("backend.tp_size", who + " failed to start: " + r.str());
  BackendInfo info = local.info();
  info.num_pages = r.i32();
  info.weight_bytes = r.u64();
  const int layers = r.i32(), hidden = r.i32(), vocab = r.i32(), tp = r.i32();
  const auto& c = local.model();
  if (layers != c.num_hidden_layers || hidden != c.hidden_size || vocab != c.vocab_size ||
      tp != info.tp_size)
    throw ConfigError("backend.tp_size", who + " loaded a different model or group size (layers " +
                                             std::to_string(layers) + ", hidden " +
                                             std::to_string(hidden) + ", vocab " +
                                             std::to_string(vocab) + ", tp " + std::to_string(tp) +
                                             ") than rank 0");
  if (equal_pages && info.num_pages != local.info().num_pages)
    throw ConfigError("cache.cpu_kv_bytes", who + " has " + std::to_string(info.num_pages) +
                                                " KV pages, rank 0 " +
                                                std::to_string(local.info().num_pages) +
                                                ": give every process the same cache settings");
  return std::make_unique<RemoteRank>(rank, std::move(control), std::move(info), c,
                                      std::move(abort_group), std::move(group_aborted));
}

int serve_tp_plans(Backend& backend, TpLink& control, int rank,
                   const std::function<bool()>& group_failed) {
  std::uint64_t steps = 0;
  std::string failed;  // the last step's error, empty when it succeeded
  for (;;) {
    TpMessage m;
    const auto st = control.recv(m, Clock::time_point::max());
    if (st != TpLink::Recv::kOk) {
      if (!failed.empty()) {
        std::fprintf(stderr,
                     "tensor parallel: rank %d: rank 0 vanished during a step (%s; the step "
                     "failed with: %s); exiting\n",
                     rank, control.error().c_str(), failed.c_str());
        return 1;
      }
      std::fprintf(stderr,
                   "tensor parallel: rank %d: rank 0 closed the connection without a stop (%s) "
                   "after %llu steps; exiting\n",
                   rank, control.error().c_str(), static_cast<unsigned long long>(steps));
      return 0;
    }
    if (m.type == TpMsg::kAbort) continue;  // the group failed during the last step: seen
    if (m.type == TpMsg::kStop) {
      std::fprintf(stderr, "tensor parallel: rank %d: rank 0 stopped the group after %llu steps\n",
                   rank, static_cast<unsigned long long>(steps));
      return 0;
    }
    if (m.type != TpMsg::kPlan) {
      std::fprintf(stderr, "tensor parallel: rank %d: unexpected message %u from rank 0\n", rank,
                   static_cast<unsigned>(m.type));
      return 1;
    }
    WirePlan wp;
    WireReply rep;
    try {
      decode_plan(m.body.data(), m.body.size(), wp);
      rep.step_id = wp.plan.step_id;
      const auto res = backend.step(wp.plan);
      rep.device_ms = res.stats.device_ms;
      failed.clear();
    } catch (const std::exception& e) {
      rep.ok = false;
      rep.error = e.what();
      rep.group_failed = group_failed && group_failed();
      failed = e.what();
      std::fprintf(stderr, "tensor parallel: rank %d: step %llu failed: %s\n", rank,
                   static_cast<unsigned long long>(rep.step_id), e.what());
    }
    ++steps;
    try {
      control.send(TpMsg::kReply, encode_reply(rep));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tensor parallel: rank %d: rank 0 vanished during step %llu (%s)%s%s\n",
                   rank, static_cast<unsigned long long>(rep.step_id), e.what(),
                   failed.empty() ? "" : "; the step failed with: ", failed.c_str());
      return 1;
    }
  }
}

std::vector<std::unique_ptr<Backend>> make_tp_process_backends(
    const TpMesh& mesh, std::unique_ptr<Backend> local,
    const std::function<void(const std::string&)>& abort_group,
    const std::function<bool()>& group_aborted, bool equal_pages) {
  if (mesh.rank != 0) throw InternalError("make_tp_process_backends: not rank 0");
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(std::move(local));
  for (int r = 1; r < mesh.size; ++r)
    out.push_back(make_remote_rank(r, mesh.control[static_cast<std::size_t>(r)], *out[0],
                                   abort_group, group_aborted, equal_pages));
  return out;
}

int run_tp_follower(const TpMesh& mesh, const std::function<std::unique_ptr<Backend>()>& build,
                    const std::function<bool()>& group_failed) {
  if (mesh.rank < 1 || mesh.control.empty()) throw InternalError("run_tp_follower: rank 0");
  auto& control = *mesh.control[0];
  std::unique_ptr<Backend> backend;
  try {
    backend = build();
  } catch (const std::exception& e) {
    try {
      tp_send_ready_error(control, e.what());
    } catch (const std::exception&) {
    }
    throw;
  }
  tp_send_ready(control, *backend);
  std::fprintf(stderr, "tensor parallel: rank %d of %d ready (%d KV pages), following rank 0\n",
               mesh.rank, mesh.size, backend->info().num_pages);
  return serve_tp_plans(*backend, control, mesh.rank, group_failed);
}

std::string tp_remote_start_error(const TpMesh& mesh, std::chrono::milliseconds wait) {
  for (int r = 1; r < mesh.size; ++r) {
    const auto& link = mesh.control[static_cast<std::size_t>(r)];
    if (!link) continue;
    TpMessage m;
    if (link->recv(m, Clock::now() + wait) != TpLink::Recv::kOk || m.type != TpMsg::kReady)
      continue;
    try {
      WireReader rd(m.body.data(), m.body.size());
      if (rd.u8() == 0) return "rank " + std::to_string(r) + " failed to start: " + rd.str();
    } catch (const std::exception&) {
    }
  }
  return {};
}

}  // namespace strata
