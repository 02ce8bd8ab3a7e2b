// The Engine facade: loads the model, starts the actors and wires their mailboxes.
#include "actors/engine.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <filesystem>
#include <future>
#include <thread>

#include "actors/admin_actor.h"
#include "actors/batcher_actor.h"
#include "actors/cache_actor.h"
#include "actors/intake_actor.h"
#include "actors/quality_monitor.h"
#include "actors/rank_executor.h"
#include "actors/token_stream.h"
#include "cache/kv_cache_manager.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"
#include "runtime/text/chat_template.h"
#include "runtime/text/tokenizer.h"

namespace strata {

namespace {

using namespace strata::actors;

class EngineImpl final : public Engine {
 public:
  EngineImpl(const Config& config, BackendFactory factory) : config_(config) {
    config_.validate();
    if (config_.model.path.empty()) throw ConfigError("model.path", "required: a model directory");
    // "random:<preset>" models have no checkpoint: the backend builds the weights on the
    // device and says what model it holds; the tokenizer comes from model.tokenizer.
    const bool random = config_.model.path.rfind("random:", 0) == 0;
    std::shared_ptr<const ModelWeights> weights;
    std::string tokenizer_json, tokenizer_config;
    if (random) {
      if (!factory)
        throw ConfigError("model.path", "'" + config_.model.path +
                                            "' (weights built on the GPU) needs the CUDA backend");
      if (config_.model.tokenizer.empty())
        throw ConfigError("model.tokenizer", "required for '" + config_.model.path +
                                                 "': a tokenizer.json or a directory holding one");
      const std::filesystem::path t(config_.model.tokenizer);
      const auto dir = std::filesystem::is_directory(t) ? t : t.parent_path();
      tokenizer_json =
          std::filesystem::is_directory(t) ? (t / "tokenizer.json").string() : t.string();
      tokenizer_config = (dir / "tokenizer_config.json").string();
    } else {
      weights = ModelWeights::load(config_.model.path);
      model_ = weights->config();
      tokenizer_json = weights->tokenizer_json();
      tokenizer_config = weights->tokenizer_config_json();
    }
    tokenizer_ = Tokenizer::load(tokenizer_json, tokenizer_config);
    auto chat = ChatTemplate::load(tokenizer_config, config_.model.chat_template);

    std::vector<std::unique_ptr<Backend>> backends;
    if (factory) {
      backends = factory(config_);
      if (random && !backends.empty()) model_ = backends[0]->model();
      if (tokenizer_->vocab_size() > model_.vocab_size)
        throw ConfigError("model.tokenizer", "the tokenizer has " +
                                                 std::to_string(tokenizer_->vocab_size()) +
                                                 " tokens, the model's vocabulary only " +
                                                 std::to_string(model_.vocab_size));
    } else {
      const CpuBackendOptions o = cpu_backend_options(config_);
      // tp_size > 1: one rank backend per RankExecutor over an in-process communicator
      // (docs/tensor-parallel.md); ConfigError when the model cannot be split that way.
      backends = make_cpu_tp_backends(weights, o, config_.backend.tp_size);
    }
    if (backends.empty()) throw ConfigError("backend", "the backend factory made no backend");
    int num_pages = backends[0]->info().num_pages;
    for (const auto& b : backends) num_pages = std::min(num_pages, b->info().num_pages);
    const KvLayout layout = backends[0]->info().layout;
    const std::string backends_name = backends[0]->info().name;
    for (const auto& b : backends)
      if (sparse_refusal_.empty()) sparse_refusal_ = b->info().sparse_refusal;
    check_runnable(config_.sparsity);
    weights.reset();  // the backends keep what they need

    std::int64_t max_len = config_.model.max_model_len > 0 ? config_.model.max_model_len
                                                           : model_.max_position_embeddings;
    SparsityProfile initial = config_.sparsity;
    // Prefix cache: cached blocks hold at most prefix_cache_fraction of the pool and at most
    // prefix_cache_bytes.
    PrefixCacheOptions pc;
    pc.enabled = config_.cache.prefix_cache;
    pc.max_pages = config_.cache.prefix_cache_pages(num_pages, layout.page_bytes());
    auto manager =
        std::make_unique<KvCacheManager>(model_.num_hidden_layers, layout, num_pages, initial, pc);
    initial.version = manager->profile_version();

    const int io_threads = 2;
    work_.emplace(boost::asio::make_work_guard(io_));
    cache_ = std::make_unique<CacheActor>(io_, std::move(manager));
    for (std::size_t r = 0; r < backends.size(); ++r) {
      ranks_.push_back(std::make_unique<RankExecutor>(static_cast<int>(r), std::move(backends[r])));
    }

    IntakeSettings is;
    is.tokenizer = tokenizer_.get();
    is.model = model_;
    is.chat = chat;
    chat_ = std::move(chat);
    is.max_model_len = max_len;
    is.request_timeout_s = config_.scheduler.request_timeout_s;
    intake_ = std::make_unique<IntakeActor>(std::move(is));

    BatcherDeps bd;
    bd.cache = cache_.get();
    for (auto& r : ranks_) bd.ranks.push_back(r.get());
    bd.tokenizer = tokenizer_.get();
    bd.model = model_;
    bd.limits = {config_.scheduler.max_num_seqs, config_.scheduler.max_num_batched_tokens,
                 config_.scheduler.chunked_prefill};
    // Several rank executors (tensor parallelism, one Backend per rank) run the synchronous
    // loop: only rank 0 samples, so a follower cannot resolve a pending input from its own
    // results (runtime/pending_inputs.h), and their collectives leave nothing to overlap anyway.
    // Its steps count as sync_loop (docs/actors.md "Sync steps").
    bd.async_steps = config_.scheduler.async_steps && ranks_.size() == 1;
    bd.waiting_slots = &waiting_slots_;
    bd.prefix_cache = config_.cache.prefix_cache;
    // What changes a block's K/V bytes besides its tokens: the weights and their arithmetic.
    bd.model_identity = config_.model.path + "|" + backends_name + "|" +
                        std::to_string(static_cast<int>(config_.model.quantization)) + "|" +
                        std::to_string(layout.elem_bytes);
    if (config_.quality_monitor.sample_rate > 0) {
      QualitySettings qs;
      qs.config = config_.quality_monitor;
      qs.vocab = model_.vocab_size;
      qs.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
      if (config_.quality_monitor.restore_on_alert) {
        const bool shrink = config_.cache.shrink_running;
        qs.on_alert = [this, shrink](const QualityAlert& a) {
          char why[160];
          std::snprintf(why, sizeof why, "profile v%llu agreement %.4f (%llu samples) alerted",
                        static_cast<unsigned long long>(a.version), a.agreement,
                        static_cast<unsigned long long>(a.samples));
          admin_->tell(RestoreProfileMsg{a.version, why, shrink});
        };
      }
      quality_ = std::make_unique<QualityMonitor>(io_, std::move(qs));
      bd.quality = config_.quality_monitor;
      bd.monitor = quality_.get();
    }
    bd.publish_stats = [this](std::shared_ptr<const EngineStats> s) {
      admin_->tell(PublishStatsMsg{std::move(s)});
    };
    batcher_ = std::make_shared<BatcherActor>(io_, std::move(bd));
    admin_ = std::make_unique<AdminActor>(io_, cache_.get(), batcher_.get(), initial,
                                          /*quiet=*/false);
    batcher_->start();
    admin_->start();
    if (quality_) quality_->start();
    for (int i = 0; i < io_threads; ++i) threads_.emplace_back([this] { io_.run(); });
  }

  ~EngineImpl() override { shutdown(std::chrono::milliseconds(0)); }

  std::shared_ptr<TokenStream> submit(Request request) override {
    if (!accepting_.load()) {
      refused_.fetch_add(1);
      throw Overloaded("the engine is shutting down");
    }
    auto prepared = intake_->prepare(std::move(request));
    int cur = waiting_slots_.load();
    do {
      if (cur >= config_.scheduler.max_waiting) {
        refused_.fetch_add(1);
        throw Overloaded("overloaded: the waiting queue is full (" +
                         std::to_string(config_.scheduler.max_waiting) + " requests)");
      }
    } while (!waiting_slots_.compare_exchange_weak(cur, cur + 1));
    auto ch = make_event_channel(io_);
    prepared->sink = EventSink(ch);
    const std::string id = prepared->id;
    const int prompt_tokens = static_cast<int>(prepared->prompt.size());
    std::weak_ptr<BatcherActor> weak = batcher_;
    const int n = prepared->n;
    auto stream = std::make_shared<RequestStream>(id, prompt_tokens, n, ch, [weak, id] {
      if (auto b = weak.lock()) b->tell(AbortMsg{id});
    });
    if (!batcher_->tell(SubmitMsg{std::move(prepared)})) {
      waiting_slots_.fetch_sub(1);
      refused_.fetch_add(1);
      throw Overloaded("the engine is shutting down");
    }
    return stream;
  }

  void abort(const std::string& request_id) override { batcher_->tell(AbortMsg{request_id}); }

  EngineStats stats() const override {
    EngineStats s = *admin_->snapshot();
    s.requests_refused = refused_.load();
    if (quality_) s.quality = quality_->snapshot();
    return s;
  }

  std::uint64_t update_sparsity(const SparsityProfile& profile) override {
    profile.resolve(model_.num_hidden_layers);  // throws ConfigError, nothing changes
    check_runnable(profile);                    // its steps would fail: nothing changes
    auto done = std::make_shared<std::promise<std::uint64_t>>();
    auto fut = done->get_future();
    if (!admin_->tell(UpdateSparsityMsg{profile, config_.cache.shrink_running, done})) {
      throw ConfigError("sparsity", "the engine is shut down");
    }
    return fut.get();
  }

  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  const ModelConfig& model() const override { return model_; }
  const Config& config() const override { return config_; }
  std::vector<std::int32_t> prompt_ids(PromptInput in) const override {
    return assemble_prompt(std::move(in), *tokenizer_, chat_.get());
  }

  void shutdown(std::chrono::milliseconds grace) override {
    if (shut_down_.exchange(true)) return;
    accepting_ = false;
    auto done = std::make_shared<std::promise<void>>();
    auto fut = done->get_future();
    if (batcher_->tell(ShutdownMsg{Clock::now() + grace, done})) fut.wait();
    batcher_->cancel();
    admin_->cancel();
    if (quality_) quality_->cancel();
    batcher_->wait();
    admin_->wait();
    if (quality_) quality_->wait();
    for (auto& r : ranks_) r->stop();
    work_.reset();
    for (auto& t : threads_) t.join();
  }

 private:
  Config config_;
  ModelConfig model_;
  std::string sparse_refusal_;  // BackendInfo::sparse_refusal of the first backend that has one
  // ConfigError("sparsity.enabled") for a profile with sparse layers the backends cannot run.
  void check_runnable(const SparsityProfile& p) const {
    if (p.enabled && !sparse_refusal_.empty())
      throw ConfigError("sparsity.enabled",
                        "this backend cannot run sparse layers: " + sparse_refusal_ +
                            " (a profile with enabled: false is accepted)");
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  std::shared_ptr<const ChatTemplate> chat_;
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::unique_ptr<CacheActor> cache_;
  std::vector<std::unique_ptr<RankExecutor>> ranks_;
  std::unique_ptr<IntakeActor> intake_;
  std::shared_ptr<BatcherActor> batcher_;
  std::unique_ptr<AdminActor> admin_;
  std::unique_ptr<QualityMonitor> quality_;  // null when quality_monitor.sample_rate is 0
  std::vector<std::thread> threads_;
  std::atomic<int> waiting_slots_{0};
  std::atomic<std::uint64_t> refused_{0};
  std::atomic<bool> accepting_{true};
  std::atomic<bool> shut_down_{false};
};

}  // namespace

std::vector<std::int32_t> Engine::prompt_ids(PromptInput in) const {
  return assemble_prompt(std::move(in), tokenizer(), nullptr);
}

std::unique_ptr<Engine> Engine::create(const Config& config, BackendFactory factory) {
  return std::make_unique<EngineImpl>(config, std::move(factory));
}

}  // namespace strata
