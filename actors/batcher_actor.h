// BatcherActor: the iteration-level scheduler. It owns the waiting / running / preempted
// queues and every in-flight request's state (outputs, detokenizer, stop matcher, stream
// sink), and runs the step loop:
//
//   schedule (one ask to the CacheActor: commit the last step, release finished/aborted
//   sequences, decide decodes / prefill chunks / admissions / preemptions)
//   -> one StepPlan to every RankExecutor -> StepDone (rank 0's results) -> tokens appended,
//   detokenized, stop conditions checked, deltas streamed -> schedule again.
//
// Aborts, submissions and deadline expiry that arrive while a step runs are applied when it
// completes: an aborted sequence's pages are released in the very next scheduling call, i.e.
// within one step.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "actors/actor.h"
#include "actors/cache_actor.h"
#include "actors/engine_stats.h"
#include "actors/rank_executor.h"
#include "actors/replay_queue.h"
#include "actors/request.h"
#include "actors/scheduler.h"
#include "actors/stop_matcher.h"
#include "actors/token_stream.h"
#include "runtime/text/detokenizer.h"
#include "runtime/text/tokenizer.h"

namespace strata::actors {

using Clock = std::chrono::steady_clock;

// A validated, tokenized request (IntakeActor's output).
struct PreparedRequest {
  std::string id;
  std::vector<std::int32_t> prompt;
  SamplingParams params;  // seed set
  int n = 1;
  std::optional<SparsityProfile> sparsity;
  std::optional<Clock::time_point> deadline;
  Clock::time_point arrival;
  EventSink sink;
  bool skip_special_tokens = true;  // in the output text
  std::string cache_salt;           // prefix-cache isolation (Request::cache_salt)
  int prompt_logprobs = -1;         // Request::prompt_logprobs
};

struct SubmitMsg {
  std::shared_ptr<PreparedRequest> req;
};
struct AbortMsg {
  std::string id;
  FinishReason reason = FinishReason::kAbort;
};
struct StepDoneMsg {
  RankCompletion completion;
};
struct LimitsMsg {
  SchedulerLimits limits;
};
struct ShutdownMsg {
  Clock::time_point deadline;
  std::shared_ptr<std::promise<void>> done;  // set when every request has ended
};
struct GraceExpiredMsg {};
using BatcherMsg =
    std::variant<SubmitMsg, AbortMsg, StepDoneMsg, LimitsMsg, ShutdownMsg, GraceExpiredMsg>;

// Counters shared with the engine facade's stats() (published as immutable snapshots).
struct BatcherDeps {
  CacheActor* cache = nullptr;
  std::vector<RankExecutor*> ranks;  // rank 0 first
  const Tokenizer* tokenizer = nullptr;
  ModelConfig model;
  SchedulerLimits limits;
  // Requests accepted by intake and not yet admitted (intake's backpressure counter; the
  // batcher gives a slot back when a request leaves the waiting queue).
  std::atomic<int>* waiting_slots = nullptr;
  std::function<void(std::shared_ptr<const EngineStats>)> publish_stats;
  // Prefix cache on: candidates carry their prompt's block names, chained from the root of
  // this model identity and the request's cache_salt (cache/block_hash.h).
  bool prefix_cache = false;
  std::string model_identity;
  // The quality guardrail: replays are scheduled here, scored by the monitor (null: off).
  QualityMonitorSection quality;
  QualityMonitor* monitor = nullptr;
  // scheduler.async_steps: the pipelined loop (docs/actors.md "Pipelined steps"): step n+1 is
  // planned and submitted (RankExecutor::submit) before step n is collected.
  bool async_steps = true;
};

class BatcherActor final : public Actor<BatcherMsg> {
 public:
  BatcherActor(asio::io_context& io, BatcherDeps deps);

 protected:
  asio::awaitable<void> handle(BatcherMsg msg) override;
  asio::awaitable<void> on_stop() override;
  const char* actor_name() const override { return "batcher"; }

 private:
  struct Req;
  struct Seq {
    std::uint64_t id = 0;
    Req* req = nullptr;
    int index = 0;
    SamplingParams params;
    std::vector<std::int32_t> output;
    std::vector<std::int32_t> recompute;  // prompt + output at the last preemption
    // Pipelined loop: preempted while a step carrying it ran (recompute is set once its results
    // are in); the step id of the last result applied; the step in flight whose sampled token
    // the next decode takes on the device (0: none: output.back() is its input); the output
    // histories the plans point to (alternating: the step in flight reads one, the next plan
    // gets the other, brought up to date).
    bool recompute_stale = false;
    std::uint64_t census_turn = 0;  // the census step that last asked it (0: none yet)
    std::uint64_t result_step = 0;
    std::uint64_t pending_step = 0;
    std::array<std::vector<std::int32_t>, 2> history;
    int history_sel = 0;
    enum class Where : std::uint8_t {
      kWaiting,
      kRunning,
      kPreempted,
      kDone
    } where = Where::kWaiting;
    int in_steps = 0;              // steps in flight carrying it: their ranks read its state
    bool release_pending = false;  // finished; pages released at the next scheduling call
    FinishReason finish = FinishReason::kNone;
    std::string error;
    std::optional<StreamEvent> final_event;  // emitted once the release returned usage
    std::unique_ptr<IncrementalDetokenizer> detok;
    StopMatcher stop;
    Clock::time_point first_token, last_token;
    double compression = 1.0;
    // Prefix cache: the names of source()'s full blocks (null: not computed or cache off),
    // the tokens of its first admission taken from the cache (-1: not admitted yet).
    std::shared_ptr<const std::vector<BlockHash>> block_hashes;
    int cached_tokens = -1;
    // What the guardrail replays: per output token the row's argmax (-1: the backend did not
    // record it) and the token's logprob; the profile version of its admissions (0: none
    // yet) and whether every admission was under that published, sparse profile.
    std::vector<std::int32_t> argmax;
    std::vector<float> logprob;
    // Prompt logprobs (PreparedRequest::prompt_logprobs >= 0): the entries scored so far (entry
    // p scores prompt token p from the row of position p - 1; entry 0 holds the first token
    // alone); sent once complete, before the first token. Non-empty exactly while entries are
    // owed (empty when none were asked or once they are sent).
    std::vector<TokenLogprob> prompt_lps;
    std::uint64_t version = 0;
    bool replayable = false;
    explicit Seq(std::vector<std::string> stops) : stop(std::move(stops)) {}
  };
  struct Req {
    std::shared_ptr<PreparedRequest> in;
    std::vector<std::unique_ptr<Seq>> seqs;
    int open = 0;          // choices not finished yet (final event not sent)
    bool waiting = true;   // holds an intake waiting slot
    bool aborted = false;  // counted in requests_aborted (else requests_finished at the end)
    std::optional<Clock::time_point> first_scheduled, first_token;
  };

  void on_submit(std::shared_ptr<PreparedRequest> r);
  void on_abort(const std::string& id, FinishReason reason, const std::string& error = "");
  // true when the step at the front of flight_ completed (every rank reported).
  bool on_step_done(RankCompletion c);
  // Runs the scheduler and dispatches the next step when there is one (true then).
  asio::awaitable<bool> kick();
  // Keeps the loop going after a message: the synchronous loop kicks when no step runs; the
  // pipelined one while fewer than two steps are in flight, then asks for the oldest's results.
  asio::awaitable<void> pump(bool schedule);
  void post_collect();
  void finish_seq(Seq& s, FinishReason reason, StreamEvent ev);
  void emit_final(Seq& s, const SeqUsage* usage);
  void leave_waiting(Req& r);
  void check_deadlines();
  void maybe_finish_shutdown();
  void publish(const CacheStats& cs);
  // Stream events go through the outbox, in order, and are sent at the end of the message's
  // handling (after the next step is dispatched: the sends overlap the step).
  void send(const EventSink& sink, StreamEvent ev);
  void flush_events();
  const std::vector<std::int32_t>& source(const Seq& s) const;
  // The prefix-cache names of source()'s full blocks, computed once per source (null: off).
  std::shared_ptr<const std::vector<BlockHash>> block_names(Seq& s) const;
  // The same over its prompt + generated tokens (null: nothing generated), at its release.
  std::shared_ptr<const std::vector<BlockHash>> output_names(const Seq& s) const;
  // The guardrail: sample a finished request's sequences for replay; a replay chunk done.
  void maybe_replay(const Req& r);
  void replay_input(ScheduleInput& in);
  void replay_output(const ReplayOutput& out);
  void on_replay_done(const SeqStep& st, SeqResult* res);
  // Prompt logprobs: whether a prefill chunk's rows are still owed, and scoring them.
  bool wants_prompt_rows(const Seq& s, int start, int n) const;
  void score_prompt_rows(Seq& s, const SeqStep& st, const SeqResult& res);

  BatcherDeps deps_;
  std::unordered_map<std::string, std::unique_ptr<Req>> requests_;
  std::unordered_map<std::uint64_t, Seq*> seqs_;
  std::deque<std::uint64_t> waiting_, preempted_;
  std::vector<std::uint64_t> running_;  // admission order
  std::vector<std::uint64_t> commit_, release_;
  std::uint64_t next_seq_ = 1, next_step_ = 1;

  // The steps in flight, oldest first (the synchronous loop: at most one; the pipelined one:
  // at most two, the oldest collected first).
  struct InFlight {
    std::shared_ptr<StepPlan> plan;
    std::vector<std::uint64_t> serials;  // export serial of each SeqStep's tables
    Clock::time_point started, dispatched;
    int completions_left = 0;
    std::optional<RankCompletion> rank0;
    std::exception_ptr error;
    bool collect_posted = false;  // pipelined: RankExecutor::collect asked
    bool census = false;          // report_kept set
  };
  std::deque<InFlight> flight_;
  // Pipelined: the rows of the last submitted step, committed at the next scheduling call (the
  // tables' state after a step follows from its plan) unless their sequence finished before
  // that step's result; requests ended while a step in flight still points into them.
  std::vector<std::uint64_t> uncommitted_;
  std::uint64_t uncommitted_step_ = 0;
  std::vector<std::unique_ptr<Req>> retired_;
  // The last completed plan, no longer referenced by any rank: its SeqSteps and page-table
  // buffers are reused by the next plan (no per-step allocation of 2 x layers vectors per
  // sequence).
  std::shared_ptr<StepPlan> spare_plan_;
  // Export serials of the tables in spare_plan_, one per SeqStep: a sequence that gets its own
  // buffer back is exported incrementally (KvCacheManager::prepare_*).
  std::vector<std::uint64_t> table_serials_;
  std::vector<std::pair<EventSink, StreamEvent>> outbox_;

  // Shutdown.
  bool stopping_ = false;
  std::shared_ptr<std::promise<void>> shutdown_done_;
  std::unique_ptr<asio::steady_timer> grace_timer_;

  // Statistics.
  EngineStats stats_;
  std::uint64_t batch_seqs_total_ = 0;
  InflightTime inflight_;  // StepTimings::inflight_ms (ms since epoch_)
  Clock::time_point epoch_ = Clock::now();
  // GPU idle between steps (StepStats::device_gap_ms), counted while work was running.
  double gpu_gap_ms_total_ = 0.0, gpu_busy_ms_total_ = 0.0;
  // Page-table bytes steps copied to the device (StepStats::table_bytes), over steps that report
  // it.
  std::uint64_t table_bytes_total_ = 0, table_steps_ = 0;
  std::uint64_t gpu_gap_steps_ = 0;
  bool prev_step_left_work_ = false;
  SyncReason prev_sync_ = SyncReason::kNone;  // how the last completed step ran
  void count_step(const StepPlan& plan);      // steps by kind
  ReplayQueue replays_;
  bool replay_queued_ = false;  // since the last scheduling call
  bool take_replay_queued() { return std::exchange(replay_queued_, false); }
  // The per-layer census (EngineStats::layers): a step asks the backend for the kept
  // positions (SeqStep::report_kept) at most every kCensusInterval; the next scheduling call
  // records them and takes the census (also when the last running sequence left).
  // A census step asks at most kCensusRows served sequences (those asked longest ago), so that
  // its cost (on the CUDA backend a device gather and a host count of every kept slot of every
  // layer) stays bounded: asking every row of a 200-sequence batch cost more than the 250 ms
  // interval on the H200, so every step became a census step (2 steps/s at 256 requests).
  static constexpr std::size_t kCensusRows = 16;
  std::uint64_t census_turn_ = 0;                                    // census steps planned
  std::vector<std::uint64_t> census_turns_;                          // per row, scratch
  std::vector<std::pair<std::uint64_t, std::size_t>> census_order_;  // (turn, row) scratch
  std::vector<char> census_pick_;                                    // rows asked this step
  static constexpr std::chrono::milliseconds kCensusInterval{250};
  Clock::time_point last_census_{};
  bool census_asked_ = false;  // a completed step had report_kept set: take the census
  std::vector<std::pair<std::uint64_t, std::vector<KeptPositions>>> kept_;
};

}  // namespace strata::actors
