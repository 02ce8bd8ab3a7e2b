#include "actors/batcher_actor.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iterator>
#include <span>
#include <thread>

#include "actors/census_turns.h"
#include "runtime/error.h"
#include "runtime/sampler.h"

namespace strata::actors {
namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

BatcherActor::BatcherActor(asio::io_context& io, BatcherDeps deps)
    : Actor(io),
      deps_(std::move(deps)),
      replays_(deps_.monitor ? deps_.quality.sample_rate : 0.0, deps_.quality.max_pending) {}

const std::vector<std::int32_t>& BatcherActor::source(const Seq& s) const {
  return s.recompute.empty() ? s.req->in->prompt : s.recompute;
}

std::shared_ptr<const std::vector<BlockHash>> BatcherActor::output_names(const Seq& s) const {
  if (s.output.empty()) return nullptr;
  std::vector<std::int32_t> all = s.req->in->prompt;
  all.insert(all.end(), s.output.begin(), s.output.end());
  return std::make_shared<const std::vector<BlockHash>>(block_hashes(
      prefix_root(deps_.model_identity, s.req->in->cache_salt), all.data(), all.size()));
}

std::shared_ptr<const std::vector<BlockHash>> BatcherActor::block_names(Seq& s) const {
  if (!deps_.prefix_cache) return nullptr;
  // Prompt logprobs still owed: every prompt position must be computed (no cached blocks).
  if (!s.prompt_lps.empty()) return nullptr;
  if (!s.block_hashes) {
    const auto& src = source(s);
    s.block_hashes = std::make_shared<const std::vector<BlockHash>>(block_hashes(
        prefix_root(deps_.model_identity, s.req->in->cache_salt), src.data(), src.size()));
  }
  return s.block_hashes;
}

asio::awaitable<void> BatcherActor::handle(BatcherMsg msg) {
  flush_events();  // (left by a handler that threw)
  bool schedule = true;
  std::visit(Overloaded{
                 [&](SubmitMsg& m) { on_submit(std::move(m.req)); },
                 [&](AbortMsg& m) { on_abort(m.id, m.reason); },
                 [&](StepDoneMsg& m) { schedule = on_step_done(std::move(m.completion)); },
                 [&](LimitsMsg& m) { deps_.limits = m.limits; },
                 [&](ShutdownMsg& m) {
                   stopping_ = true;
                   shutdown_done_ = m.done;
                   grace_timer_ = std::make_unique<asio::steady_timer>(strand_, m.deadline);
                   grace_timer_->async_wait([this](boost::system::error_code ec) {
                     if (!ec) tell(GraceExpiredMsg{});
                   });
                 },
                 [&](GraceExpiredMsg&) {
                   std::vector<std::string> ids;
                   for (const auto& [id, r] : requests_) ids.push_back(id);
                   for (const auto& id : ids) on_abort(id, FinishReason::kAbort);
                 },
             },
             msg);
  co_await pump(schedule);
  // The next step is running now (if there is one): the stream events of this message go out
  // while it does.
  flush_events();
  maybe_finish_shutdown();
}

asio::awaitable<void> BatcherActor::pump(bool schedule) {
  if (!deps_.async_steps) {
    // Once more when a request that finished in that call queued a replay (its chance now).
    for (bool again = schedule; again && flight_.empty(); again = take_replay_queued())
      co_await kick();
    co_return;
  }
  // Pipelined: plan the next step while the one in flight runs (depth 2), then ask for the
  // oldest step's results (a step with nothing after it is collected too).
  if (schedule) {
    while (flight_.size() < 2) {
      if (co_await kick()) continue;
      if (!take_replay_queued()) break;
    }
  }
  if (!flight_.empty() && !flight_.front().collect_posted) post_collect();
}

void BatcherActor::post_collect() {
  flight_.front().collect_posted = true;
  for (auto* rank : deps_.ranks)
    rank->collect([this](RankCompletion c) { tell(StepDoneMsg{std::move(c)}); });
}

void BatcherActor::send(const EventSink& sink, StreamEvent ev) {
  outbox_.emplace_back(sink, std::move(ev));
}

void BatcherActor::flush_events() {
  for (auto& [sink, ev] : outbox_) sink.send(std::move(ev));
  outbox_.clear();
}

void BatcherActor::on_submit(std::shared_ptr<PreparedRequest> in) {
  auto r = std::make_unique<Req>();
  r->in = std::move(in);
  if (requests_.count(r->in->id)) {
    for (int i = 0; i < r->in->n; ++i) {
      StreamEvent ev;
      ev.index = i;
      ev.finish = FinishReason::kError;
      ev.error = "duplicate request id '" + r->in->id + "'";
      send(r->in->sink, std::move(ev));
    }
    deps_.waiting_slots->fetch_sub(1);
    return;
  }
  for (int i = 0; i < r->in->n; ++i) {
    auto s = std::make_unique<Seq>(r->in->params.stop);
    s->id = next_seq_++;
    s->req = r.get();
    s->index = i;
    s->params = r->in->params;
    // Choice 0 keeps the request's seed; the others derive theirs deterministically.
    if (i > 0) s->params.seed = splitmix64(r->in->params.seed ^ (0x5851F42D4C957F2Dull * i));
    s->detok =
        std::make_unique<IncrementalDetokenizer>(*deps_.tokenizer, r->in->skip_special_tokens);
    if (r->in->prompt_logprobs >= 0) {
      TokenLogprob first;  // nothing precedes the first prompt token: its token alone
      first.token = r->in->prompt.front();
      s->prompt_lps.push_back(std::move(first));
    }
    seqs_[s->id] = s.get();
    waiting_.push_back(s->id);
    r->seqs.push_back(std::move(s));
  }
  r->open = r->in->n;
  stats_.prompt_tokens_total += r->in->prompt.size();
  requests_[r->in->id] = std::move(r);
}

void BatcherActor::leave_waiting(Req& r) {
  if (!r.waiting) return;
  for (const auto& s : r.seqs) {
    if (s->where == Seq::Where::kWaiting) return;  // still a choice waiting
  }
  r.waiting = false;
  deps_.waiting_slots->fetch_sub(1);
}

void BatcherActor::on_abort(const std::string& id, FinishReason reason, const std::string& error) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  // The last finish_seq may end the request (and destroy it): collect first.
  std::vector<Seq*> open;
  for (auto& s : it->second->seqs) {
    if (s->finish == FinishReason::kNone) open.push_back(s.get());
  }
  // A request counts once, as aborted or as finished: a repeated abort, or one that arrives
  // after every choice finished (final events held until the release), changes nothing.
  if (reason == FinishReason::kAbort && !open.empty() && !it->second->aborted) {
    it->second->aborted = true;
    ++stats_.requests_aborted;
  }
  for (Seq* s : open) {
    StreamEvent ev;
    ev.error = error;
    finish_seq(*s, reason, std::move(ev));
  }
}

// Marks a sequence finished: it leaves the queues now; its pages are released at the next
// scheduling call (after the step it is part of has completed), and the final event goes
// out with the released usage.
void BatcherActor::finish_seq(Seq& s, FinishReason reason, StreamEvent ev) {
  s.finish = reason;
  ev.index = s.index;
  ev.finish = reason;
  s.final_event = std::move(ev);
  const auto where = s.where;
  s.where = Seq::Where::kDone;
  if (where == Seq::Where::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s.id));
    leave_waiting(*s.req);
    emit_final(s, nullptr);  // never held pages
    return;
  }
  if (where == Seq::Where::kPreempted) {
    preempted_.erase(std::find(preempted_.begin(), preempted_.end(), s.id));
    emit_final(s, nullptr);  // its pages were freed at preemption
    return;
  }
  running_.erase(std::find(running_.begin(), running_.end(), s.id));
  s.release_pending = true;
  // Synchronous: when the step carrying it completes. Pipelined: at the next scheduling call
  // (steps run in order on a backend: a later step reusing its pages writes them after).
  if (deps_.async_steps || s.in_steps == 0) release_.push_back(s.id);
}

void BatcherActor::emit_final(Seq& s, const SeqUsage* usage) {
  if (usage) s.compression = usage->compression;
  Req& r = *s.req;
  StreamEvent ev = std::move(*s.final_event);
  s.final_event.reset();
  s.release_pending = false;
  if (--r.open == 0) {
    const auto now = Clock::now();
    Usage u;
    u.prompt_tokens = static_cast<int>(r.in->prompt.size());
    double itl_sum = 0;
    int itl_n = 0;
    double comp = 0;
    std::optional<Clock::time_point> last_token;
    for (const auto& q : r.seqs) {
      u.completion_tokens += static_cast<int>(q->output.size());
      if (!q->output.empty() && (!last_token || q->last_token > *last_token))
        last_token = q->last_token;
      if (q->output.size() > 1) {
        itl_sum += ms_between(q->first_token, q->last_token);
        itl_n += static_cast<int>(q->output.size()) - 1;
      }
      comp += q->compression;
    }
    u.queue_ms = r.first_scheduled ? ms_between(r.in->arrival, *r.first_scheduled) : 0.0;
    u.ttft_ms = r.first_token ? ms_between(r.in->arrival, *r.first_token) : 0.0;
    u.e2e_ms = ms_between(r.in->arrival, now);
    u.mean_itl_ms = itl_n > 0 ? itl_sum / itl_n : 0.0;
    if (r.first_scheduled && r.first_token)
      u.prefill_ms = ms_between(*r.first_scheduled, *r.first_token);
    if (r.first_token && last_token) u.decode_ms = ms_between(*r.first_token, *last_token);
    if (r.first_scheduled && last_token)
      u.inference_ms = ms_between(*r.first_scheduled, *last_token);
    u.max_tokens = r.in->params.max_tokens;
    for (const auto& q : r.seqs) u.cached_tokens = std::max(u.cached_tokens, q->cached_tokens);
    u.compression_ratio = comp / static_cast<double>(r.seqs.size());
    ev.usage = u;
    send(r.in->sink, std::move(ev));
    if (!r.aborted) ++stats_.requests_finished;
    maybe_replay(r);
    const bool busy =
        std::any_of(r.seqs.begin(), r.seqs.end(), [](const auto& q) { return q->in_steps > 0; });
    if (!busy)
      for (const auto& q : r.seqs) seqs_.erase(q->id);
    auto node = requests_.extract(r.in->id);  // destroys r and s (unless a step still reads them)
    if (busy) retired_.push_back(std::move(node.mapped()));
    return;
  }
  send(r.in->sink, std::move(ev));
}

void BatcherActor::check_deadlines() {
  const auto now = Clock::now();
  std::vector<std::string> late;
  for (const auto& [id, r] : requests_) {
    if (r->in->deadline && *r->in->deadline <= now) late.push_back(id);
  }
  for (const auto& id : late) {
    on_abort(id, FinishReason::kTimeout, "deadline exceeded");
  }
}

bool BatcherActor::on_step_done(RankCompletion c) {
  STRATA_CHECK(!flight_.empty(), "a step completion with no step in flight");
  InFlight& front = flight_.front();
  if (c.error && !front.error) front.error = c.error;
  if (c.rank == 0) front.rank0 = std::move(c);
  if (--front.completions_left > 0) return false;

  InFlight done = std::move(front);
  flight_.pop_front();
  auto plan = std::move(done.plan);
  auto& rank0 = done.rank0;
  const bool async = deps_.async_steps;
  if (done.census) census_asked_ = true;
  const auto now = Clock::now();
  StepTimings& tm = stats_.timings;
  if (rank0) {
    tm.dispatch_ms += ms_between(done.dispatched, rank0->started);
    tm.backend_ms += rank0->wall_ms;
    tm.return_ms += ms_between(rank0->finished, now);
  }
  std::string error;
  if (done.error) {
    try {
      std::rethrow_exception(done.error);
    } catch (const std::exception& e) {
      error = std::string("backend step failed: ") + e.what();
    }
  } else if (!rank0 || rank0->result.seqs.size() != plan->seqs.size()) {
    error = "backend returned a malformed step result";
  }
  for (std::size_t i = 0; i < plan->seqs.size(); ++i) {
    const auto id = plan->seqs[i].seq_id;
    if (replays_.owns(id)) {
      on_replay_done(plan->seqs[i], error.empty() ? &rank0->result.seqs[i] : nullptr);
      continue;
    }
    auto found = seqs_.find(id);
    // Pipelined: a replay preempted or dropped while its chunk ran (its rows are asked again).
    if (found == seqs_.end()) continue;
    Seq& s = *found->second;
    --s.in_steps;
    if (s.pending_step == plan->step_id) s.pending_step = 0;
    if (!async) {
      commit_.push_back(id);
      if (s.release_pending) {  // finished (aborted, timed out) while the step ran
        release_.push_back(id);
        continue;
      }
    } else if (s.finish != FinishReason::kNone) {
      // Finished (by an earlier step's token, an abort, a deadline) after this step was
      // planned: its token is discarded, never emitted or counted; the row is never committed
      // and the pages went back at the scheduling call after the finish.
      continue;
    }
    if (!error.empty()) {
      StreamEvent ev;
      ev.error = error;
      finish_seq(s, FinishReason::kError, std::move(ev));
      continue;
    }
    SeqResult& res = rank0->result.seqs[i];
    s.result_step = plan->step_id;
    if (!res.kept.empty()) kept_.emplace_back(id, std::move(res.kept));
    if (plan->seqs[i].prefill && !s.prompt_lps.empty()) {
      score_prompt_rows(s, plan->seqs[i], res);
      if (s.finish != FinishReason::kNone) continue;  // (the scoring failed)
    }
    if (res.token < 0) continue;  // a prefill chunk that did not end the prompt
    Req& r = *s.req;
    s.output.push_back(res.token);
    s.argmax.push_back(res.argmax);
    s.logprob.push_back(res.logprob);
    ++stats_.generation_tokens_total;
    if (s.output.size() == 1)
      s.first_token = now;
    else
      stats_.inter_token_latency_s.observe(ms_between(s.last_token, now) / 1000.0);
    s.last_token = now;
    if (!r.first_token) r.first_token = now;

    const auto& p = s.params;
    const bool eos = (!p.ignore_eos &&
                      std::find(deps_.model.eos_token_ids.begin(), deps_.model.eos_token_ids.end(),
                                res.token) != deps_.model.eos_token_ids.end()) ||
                     std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), res.token) !=
                         p.stop_token_ids.end();
    StreamEvent ev;
    ev.index = s.index;
    ev.token_ids.push_back(res.token);
    if (p.logprobs >= 0) {
      TokenLogprob lp;
      lp.token = res.token;
      lp.logprob = res.logprob;
      lp.top = res.top;
      ev.logprobs.push_back(std::move(lp));
    }
    if (!eos) ev.text = s.stop.push(s.detok->push(res.token));
    FinishReason fin = FinishReason::kNone;
    if (eos || s.stop.stopped()) {
      fin = FinishReason::kStop;
    } else if (static_cast<int>(s.output.size()) >= p.max_tokens) {
      fin = FinishReason::kLength;
    }
    if (fin == FinishReason::kNone) {
      if (!ev.text.empty() || !ev.token_ids.empty()) send(r.in->sink, std::move(ev));
      continue;
    }
    if (!s.stop.stopped()) ev.text += s.stop.push(s.detok->finish()) + s.stop.flush();
    finish_seq(s, fin, std::move(ev));
  }
  if (error.empty()) {
    const StepStats& ss = rank0->result.stats;
    tm.device_ms += ss.device_ms;
    // GPU idle (issue 24 item 4): the device gap before this step counts when the previous
    // step left sequences running (the engine had work and the device waited for the host);
    // a gap after the engine ran dry is the server waiting for requests, not overhead.
    // A gap next to a synchronous step is that step's: before it (the drain) or after it (the
    // refill, planned only once its results were in).
    const SyncReason why = async ? ss.sync : SyncReason::kSyncLoop;
    if (ss.device_gap_ms >= 0.0) {
      gpu_busy_ms_total_ += ss.device_ms;
      if (prev_step_left_work_) {
        gpu_gap_ms_total_ += ss.device_gap_ms, ++gpu_gap_steps_;
        const SyncReason cause = why != SyncReason::kNone ? why : prev_sync_;
        stats_.gpu_idle_ms_by_sync[static_cast<std::size_t>(cause)] += ss.device_gap_ms;
      }
    }
    ++stats_.sync_steps[static_cast<std::size_t>(why)];
    prev_sync_ = why;
    if (ss.table_bytes >= 0) table_bytes_total_ += ss.table_bytes, ++table_steps_;
  }
  const auto end = Clock::now();
  inflight_.add(ms_between(epoch_, done.started), ms_between(epoch_, end));
  tm.inflight_ms = inflight_.total();
  tm.wall_ms += ms_between(done.started, end);
  tm.finish_ms += ms_between(now, end);
  ++tm.steps;
  ++stats_.steps;
  count_step(*plan);
  prev_step_left_work_ = !running_.empty();
  batch_seqs_total_ += plan->seqs.size();
  // Every rank has dropped its reference before completing (RankExecutor::run): recycle.
  if (plan.use_count() == 1) {
    spare_plan_ = std::move(plan);
    table_serials_ = std::move(done.serials);
  }
  // Requests that ended while this step still read them.
  std::erase_if(retired_, [&](const std::unique_ptr<Req>& r) {
    if (std::any_of(r->seqs.begin(), r->seqs.end(), [](const auto& q) { return q->in_steps > 0; }))
      return false;
    for (const auto& q : r->seqs) seqs_.erase(q->id);
    return true;
  });
  return true;
}

asio::awaitable<bool> BatcherActor::kick() {
  check_deadlines();
  const bool async = deps_.async_steps;
  ScheduleInput in;
  in.commit = std::exchange(commit_, {});
  // Pipelined: the rows of the step submitted last (in flight, or collected since) advance the
  // tables now, except those of sequences that finished before it (their extra row).
  for (const auto id : std::exchange(uncommitted_, {})) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || it->second->finish == FinishReason::kNone ||
        it->second->result_step >= uncommitted_step_)
      in.commit.push_back(id);
  }
  in.release = std::exchange(release_, {});
  if (deps_.prefix_cache)  // (the manager caches generated blocks only with sparsity off)
    for (const auto id : in.release) {
      auto it = seqs_.find(id);
      in.release_names.push_back(it == seqs_.end() ? nullptr : output_names(*it->second));
    }
  in.running = running_;
  if (async) {
    // A sequence that the step in flight brings to max_tokens is not planned again (a decode
    // past max_tokens would also write past its reservation).
    std::erase_if(in.running, [&](std::uint64_t id) {
      const Seq& s = *seqs_.at(id);
      return s.pending_step != 0 && static_cast<int>(s.output.size()) + 1 >= s.params.max_tokens;
    });
  }
  in.limits = deps_.limits;
  replay_input(in);
  in.kept = std::exchange(kept_, {});
  // The step that asked for kept positions completed, or the last sequence leaves: take the
  // layer census.
  in.census = std::exchange(census_asked_, false) || (running_.empty() && !in.release.empty());
  // More candidates than free seats cannot be admitted in one step; rejected ones (never
  // fit) are skipped, so pass some extra.
  const std::size_t seats = static_cast<std::size_t>(
      std::max(0, deps_.limits.max_num_seqs - static_cast<int>(running_.size())));
  const std::size_t max_cand = seats * 2 + 4;
  for (auto q : {&preempted_, &waiting_}) {
    for (const auto id : *q) {
      if (in.candidates.size() >= max_cand || seats == 0) break;
      Seq& s = *seqs_.at(id);
      // Pipelined: preempted while a step carrying it ran; readmitted once its results are in.
      if (s.in_steps > 0) continue;
      if (s.recompute_stale) {
        s.recompute = s.req->in->prompt;
        s.recompute.insert(s.recompute.end(), s.output.begin(), s.output.end());
        s.recompute_stale = false;
      }
      Candidate c;
      c.seq_id = id;
      c.spec.prompt_len = static_cast<int>(source(s).size());
      c.spec.max_tokens = s.params.max_tokens - static_cast<int>(s.output.size());
      c.spec.chunked = deps_.limits.chunked_prefill;
      c.spec.sparsity = s.req->in->sparsity;
      c.spec.block_hashes = block_names(s);
      in.candidates.push_back(std::move(c));
    }
  }
  if (in.commit.empty() && in.release.empty() && in.running.empty() && in.candidates.empty() &&
      in.replays.running.empty() && in.replays.candidates.empty()) {
    co_return false;
  }
  const auto t0 = Clock::now();
  const auto released_ids = in.release;
  // The recycled plan's page-table buffers go to the cache actor, which exports into them.
  std::shared_ptr<StepPlan> plan = std::move(spare_plan_);
  if (plan) {
    in.spare_tables.resize(plan->seqs.size());
    for (std::size_t i = 0; i < plan->seqs.size(); ++i) {
      SpareTables& t = in.spare_tables[i];
      t.seq_id = plan->seqs[i].seq_id;
      t.serial = i < table_serials_.size() ? table_serials_[i] : 0;
      t.layers = std::move(plan->seqs[i].layers);
    }
  } else {
    plan = std::make_shared<StepPlan>();
  }
  const bool took_census = in.census;
  auto job = [in = std::move(in)](KvCacheManager& m) mutable { return schedule_step(m, in); };
  auto ask = deps_.cache->ask(std::move(job));
  ScheduleOutput out = co_await std::move(ask);
  const auto t1 = Clock::now();

  for (const auto& [id, usage] : out.released) {
    auto it = seqs_.find(id);
    if (it != seqs_.end() && it->second->final_event) emit_final(*it->second, &usage);
  }
  // Released sequences the cache did not hold (defensive) still get their final event.
  for (const auto id : released_ids) {
    auto it = seqs_.find(id);
    if (it != seqs_.end() && it->second->final_event) emit_final(*it->second, nullptr);
  }
  for (const auto id : out.preempted) {
    Seq& s = *seqs_.at(id);
    running_.erase(std::find(running_.begin(), running_.end(), id));
    s.where = Seq::Where::kPreempted;
    if (s.in_steps > 0) {  // pipelined: its output is not complete yet
      s.recompute_stale = true;
    } else {
      s.recompute = s.req->in->prompt;
      s.recompute.insert(s.recompute.end(), s.output.begin(), s.output.end());
    }
    s.block_hashes.reset();  // (named again over the longer source)
    ++stats_.preemptions;
  }
  // Victims were popped newest first: pushing each to the front leaves the oldest first.
  for (const auto id : out.preempted) preempted_.push_front(id);
  for (std::size_t i = 0; i < out.admitted.size(); ++i) {
    const auto id = out.admitted[i];
    Seq& s = *seqs_.at(id);
    if (s.cached_tokens < 0 && i < out.admitted_cached.size())
      s.cached_tokens = out.admitted_cached[i];
    if (s.where == Seq::Where::kWaiting) {
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
    } else {
      preempted_.erase(std::find(preempted_.begin(), preempted_.end(), id));
    }
    s.where = Seq::Where::kRunning;
    const bool sparse = out.profile_sparse && !s.req->in->sparsity;
    s.replayable = (s.version == 0 || s.replayable) && sparse &&
                   (s.version == 0 || s.version == out.stats.profile_version);
    s.version = out.stats.profile_version;
    running_.push_back(id);
    if (!s.req->first_scheduled) s.req->first_scheduled = Clock::now();
    leave_waiting(*s.req);
  }
  replay_output(out.replays);
  for (const auto& [id, why] : out.rejected) {
    Seq& s = *seqs_.at(id);
    StreamEvent ev;
    ev.error = why;
    finish_seq(s, FinishReason::kError, std::move(ev));
  }

  if (took_census)
    stats_.layers = std::make_shared<const std::vector<LayerUsage>>(std::move(out.census));
  publish(out.stats);
  if (out.steps.empty()) {  // (not a step: its time is in no step's timings)
    plan->seqs.clear();
    spare_plan_ = std::move(plan);  // (its table buffers went to the cache actor)
    co_return false;
  }

  // Every field of a reused SeqStep is assigned (vectors keep their capacity).
  plan->step_id = next_step_++;
  const bool census = t0 - last_census_ >= kCensusInterval;
  if (census) last_census_ = t0;
  // A census step reads the kept positions of at most kCensusRows served rows, those asked
  // longest ago (Seq::census_turn), so its cost stays bounded at any batch and every running
  // sequence takes its turn.
  if (census) {
    ++census_turn_;
    census_turns_.resize(out.steps.size());
    for (std::size_t i = 0; i < out.steps.size(); ++i)
      census_turns_[i] = replays_.owns(out.steps[i].seq_id)
                             ? kNotServed
                             : seqs_.at(out.steps[i].seq_id)->census_turn;
    pick_census_rows(census_turns_, kCensusRows, census_order_, census_pick_);
  }
  plan->released_pages = std::move(out.released_pages);
  plan->seqs.resize(out.steps.size());
  InFlight f;
  f.serials.resize(out.steps.size());
  for (std::size_t i = 0; i < out.steps.size(); ++i) {
    auto& p = out.steps[i];
    if (async) uncommitted_.push_back(p.seq_id);
    if (replays_.owns(p.seq_id)) {
      f.serials[i] = p.serial;
      replays_.fill(plan->seqs[i], p);
      continue;
    }
    Seq& s = *seqs_.at(p.seq_id);
    const auto& src = source(s);
    SeqStep& st = plan->seqs[i];
    st.seq_id = p.seq_id;
    st.prefill = p.prefill;
    st.start = p.start;
    st.layers = std::move(p.layers);
    st.table_serial = p.serial;
    st.table_base = p.base;
    f.serials[i] = p.serial;
    st.prompt_len = static_cast<int>(src.size());
    st.return_logits = false;
    st.input_pending = false;
    if (p.prefill) {
      st.return_logits = wants_prompt_rows(s, p.start, p.n_tokens);
      st.tokens.assign(src.begin() + p.start, src.begin() + p.start + p.n_tokens);
      st.sample = p.start + p.n_tokens == st.prompt_len;
    } else if (s.pending_step != 0) {
      // Pipelined: the input is the token the step in flight samples; the backend feeds it.
      STRATA_CHECK(s.pending_step + 1 == plan->step_id,
                   "a pending input must come from the previous step");
      st.tokens.assign(1, kPendingToken);
      st.input_pending = true;
      st.sample = true;
    } else {
      st.tokens.assign(1, s.output.back());
      st.sample = true;
    }
    st.params = &s.params;
    st.prompt = &s.req->in->prompt;
    if (async) {
      // The step in flight may read the other history: bring this one up to date (output only
      // grows) and point the plan at it; neither changes until this step is collected.
      auto& h = s.history[s.history_sel ^= 1];
      h.insert(h.end(), s.output.begin() + static_cast<std::ptrdiff_t>(h.size()), s.output.end());
      st.output = &h;
      if (st.sample) s.pending_step = plan->step_id;
    } else {
      st.output = &s.output;
    }
    st.report_kept = census && census_pick_[i] != 0;
    if (st.report_kept) s.census_turn = census_turn_;
    ++s.in_steps;
  }
  f.plan = plan;
  f.started = t0;
  f.dispatched = Clock::now();
  f.census = census;
  f.completions_left = static_cast<int>(deps_.ranks.size());
  stats_.timings.schedule_ms += ms_between(t0, t1);
  stats_.timings.schedule_job_ms += out.job_ms;
  stats_.timings.plan_ms += ms_between(t1, f.dispatched);
  flight_.push_back(std::move(f));
  if (async) {
    uncommitted_step_ = plan->step_id;
    for (auto* rank : deps_.ranks) rank->submit(plan);
  } else {
    for (auto* rank : deps_.ranks)
      rank->run(plan, [this](RankCompletion c) { tell(StepDoneMsg{std::move(c)}); });
  }
  co_return true;
}

bool BatcherActor::wants_prompt_rows(const Seq& s, int start, int n) const {
  if (s.prompt_lps.empty()) return false;  // none asked, or sent
  // Row j of the chunk scores prompt token start + j + 1; the next one owed is prompt_lps.size().
  const int owed = static_cast<int>(s.prompt_lps.size());
  const int prompt = static_cast<int>(s.req->in->prompt.size());
  return start + n >= owed && start + 1 < prompt;
}

void BatcherActor::score_prompt_rows(Seq& s, const SeqStep& st, const SeqResult& res) {
  const auto& prompt = s.req->in->prompt;
  const auto P = prompt.size();
  const auto V = static_cast<std::size_t>(deps_.model.vocab_size);
  const std::size_t n = st.tokens.size();
  std::string error;
  if (st.return_logits && static_cast<std::size_t>(st.start) + 1 < P) {
    if (res.logits.size() != n * V) {
      error = "backend returned " + std::to_string(res.logits.size()) +
              " prompt logits for a chunk of " + std::to_string(n) + " rows";
    } else {
      // Rows [j0, j1) score prompt tokens [owed, owed + j1 - j0) (rows before j0 were scored
      // by an earlier, preempted prefill); a row costs ~0.25-0.7 ms at 128k tokens on one core
      // (tests/runtime/sampler_test.cpp prints it), so long chunks are split over threads.
      const std::size_t owed = s.prompt_lps.size();
      const std::size_t j0 = owed - 1 - std::min(owed - 1, static_cast<std::size_t>(st.start));
      const std::size_t j1 = std::min(n, P - 1 - static_cast<std::size_t>(st.start));
      if (static_cast<std::size_t>(st.start) + j0 + 1 != owed) {
        error = "prompt logprobs: a chunk starts after the next position owed";
      } else if (j1 > j0) {
        std::vector<TokenLogprob> rows(j1 - j0);
        const int n_top = s.req->in->prompt_logprobs;
        auto score = [&](std::size_t a, std::size_t b) {
          for (std::size_t j = a; j < b; ++j) {
            const std::size_t q = static_cast<std::size_t>(st.start) + j + 1;
            PromptScore sc = score_prompt_row(std::span<const float>(res.logits.data() + j * V, V),
                                              prompt[q], n_top);
            TokenLogprob& lp = rows[j - j0];
            lp.token = prompt[q];
            lp.logprob = sc.logprob;
            lp.rank = sc.rank;
            lp.top = std::move(sc.top);
          }
        };
        const std::size_t count = j1 - j0;
        const std::size_t threads = std::clamp<std::size_t>(
            std::min<std::size_t>(count / 16, std::thread::hardware_concurrency()), 1, 8);
        std::vector<std::exception_ptr> failed(threads);
        {
          std::vector<std::jthread> pool;
          for (std::size_t t = 1; t < threads; ++t)
            pool.emplace_back([&, t] {
              try {
                score(j0 + count * t / threads, j0 + count * (t + 1) / threads);
              } catch (...) {
                failed[t] = std::current_exception();
              }
            });
          try {
            score(j0, j0 + count / threads);
          } catch (...) {
            failed[0] = std::current_exception();
          }
        }
        for (const auto& f : failed) {
          if (!f || !error.empty()) continue;
          try {
            std::rethrow_exception(f);
          } catch (const std::exception& e) {
            error = std::string("prompt logprobs: ") + e.what();
          }
        }
        if (error.empty())
          s.prompt_lps.insert(s.prompt_lps.end(), std::make_move_iterator(rows.begin()),
                              std::make_move_iterator(rows.end()));
      }
    }
  }
  if (!error.empty()) {
    StreamEvent ev;
    ev.error = std::move(error);
    finish_seq(s, FinishReason::kError, std::move(ev));
    return;
  }
  if (s.prompt_lps.size() < P) return;
  StreamEvent ev;
  ev.index = s.index;
  ev.prompt_logprobs = std::exchange(s.prompt_lps, {});  // (empty from now on: nothing owed)
  send(s.req->in->sink, std::move(ev));
}

// Steps by kind (EngineStats::steps_decode / _prefill / _mixed).
void BatcherActor::count_step(const StepPlan& plan) {
  bool prefill = false, decode = false;
  for (const SeqStep& s : plan.seqs) (s.prefill ? prefill : decode) = true;
  if (prefill && decode)
    ++stats_.steps_mixed;
  else if (prefill)
    ++stats_.steps_prefill;
  else if (decode)
    ++stats_.steps_decode;
}

// The replays' part of a scheduling call (in and out).
void BatcherActor::replay_input(ScheduleInput& in) {
  if (stopping_) {
    const auto held = replays_.clear();
    in.release.insert(in.release.end(), held.begin(), held.end());
  }
  in.replays.running = replays_.running();
  in.replays.stalled = replays_.stalled();
  in.replays.candidates = replays_.candidates();
  in.replays.served_queued = static_cast<int>(waiting_.size() + preempted_.size());
}

void BatcherActor::replay_output(const ReplayOutput& out) {
  for (const auto id : out.preempted) {
    replays_.preempted(id);
    ++stats_.replays.preempted;
  }
  for (const auto id : out.admitted) replays_.admitted(id);
  for (const auto& [id, n] : out.stalled) replays_.set_stalled(id, n);
  for (const auto id : out.rejected) {
    replays_.drop(id);
    ++stats_.replays.dropped;
  }
}

void BatcherActor::maybe_replay(const Req& r) {
  if (r.aborted || stopping_ || !deps_.monitor) return;
  for (const auto& q : r.seqs) {
    if (!q->replayable || q->output.empty() ||
        (q->finish != FinishReason::kStop && q->finish != FinishReason::kLength))
      continue;
    if (std::any_of(q->argmax.begin(), q->argmax.end(), [](std::int32_t a) { return a < 0; }))
      continue;  // the backend did not record the sparse argmax
    if (!replays_.sample()) continue;
    ++stats_.replays.sampled;
    auto rec = std::make_shared<ReplayRecord>();
    rec->profile_version = q->version;
    rec->prompt = r.in->prompt;
    rec->output = q->output;
    rec->argmax = q->argmax;
    rec->logprob = q->logprob;
    rec->params = q->params;
    if (!q->params.ignore_eos) rec->eos_ids = deps_.model.eos_token_ids;
    if (replays_.push(next_seq_++, std::move(rec)))
      replay_queued_ = true;
    else
      ++stats_.replays.dropped;
  }
}

void BatcherActor::on_replay_done(const SeqStep& st, SeqResult* res) {
  if (!deps_.async_steps) commit_.push_back(st.seq_id);  // (pipelined: at submission)
  if (!res) {                                            // the step failed: give the replay up
    if (replays_.drop(st.seq_id)) release_.push_back(st.seq_id);
    deps_.monitor->tell(ReplayAbandonedMsg{st.seq_id});
    ++stats_.replays.dropped;
    return;
  }
  ++stats_.replays.steps;
  stats_.replays.tokens += st.tokens.size();
  auto done = replays_.completed(st, std::move(res->logits));
  if (done.rows) deps_.monitor->tell(std::move(*done.rows));
  if (done.finished) {
    release_.push_back(st.seq_id);
    ++stats_.replays.finished;
  }
}

void BatcherActor::publish(const CacheStats& cs) {
  if (!deps_.publish_stats) return;
  auto st = std::make_shared<EngineStats>(stats_);
  st->running = static_cast<int>(running_.size());
  st->waiting = static_cast<int>(waiting_.size());
  st->preempted = static_cast<int>(preempted_.size());
  st->pages_total = cs.pages_total;
  // Cached pages no sequence holds (all of an unused block's, the sparse-layer copies of a block
  // whose users have selected) are free memory (vLLM counts unused blocks free too): evicted
  // when needed. pages_used = the pages sequences hold.
  st->pages_used = cs.pages_used - cs.pages_evictable;
  st->pages_cached = cs.pages_cached;
  st->prefix_cache_queries = cs.prefix_queries;
  st->prefix_cache_hits = cs.prefix_hits;
  st->pages_per_layer = cs.pages_per_layer;
  st->page_bytes = cs.page_bytes;
  st->kv_usage = cs.pages_total > 0 ? static_cast<double>(st->pages_used) / cs.pages_total : 0.0;
  st->compression_ratio = cs.compression;
  st->mean_batch = stats_.steps > 0 ? static_cast<double>(batch_seqs_total_) / stats_.steps : 0.0;
  const StepTimings& tm = stats_.timings;
  st->host_overhead = tm.inflight_ms > 0 ? std::max(0.0, 1.0 - tm.device_ms / tm.inflight_ms) : 0.0;
  st->gpu_idle_steps = gpu_gap_steps_;
  st->gpu_idle_ms = gpu_gap_ms_total_;
  st->table_bytes = table_bytes_total_;
  st->table_steps = table_steps_;
  st->gpu_busy_ms = gpu_busy_ms_total_;
  st->gpu_idle_ratio = gpu_gap_ms_total_ + gpu_busy_ms_total_ > 0
                           ? gpu_gap_ms_total_ / (gpu_gap_ms_total_ + gpu_busy_ms_total_)
                           : 0.0;
  st->profile_version = cs.profile_version;
  deps_.publish_stats(std::move(st));
}

void BatcherActor::maybe_finish_shutdown() {
  if (!stopping_ || !shutdown_done_ || !flight_.empty() || !requests_.empty() ||
      !release_.empty() || !replays_.empty())
    return;
  if (grace_timer_) grace_timer_->cancel();
  shutdown_done_->set_value();
  shutdown_done_.reset();
}

asio::awaitable<void> BatcherActor::on_stop() {
  // Whatever is left (a cancel without a graceful shutdown): end the streams.
  flush_events();
  for (auto& [id, r] : requests_) {
    for (const auto& q : r->seqs) {
      if (q->finish != FinishReason::kNone && !q->final_event) continue;  // already sent
      StreamEvent ev;
      ev.index = q->index;
      ev.finish = FinishReason::kAbort;
      r->in->sink.send(std::move(ev));
    }
  }
  requests_.clear();
  retired_.clear();
  seqs_.clear();
  co_return;
}

}  // namespace strata::actors
