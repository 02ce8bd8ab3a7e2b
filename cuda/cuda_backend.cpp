// CUDA backend: weights, KV pool, the per-step forward pass and CUDA graphs (see the header).
#include "cuda/cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <span>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "cuda/attention.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/dispatch.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cuda/sampling.h"
#include "cuda/sparse/sparse_kernels.h"
#include "cuda/sparse/sparse_plan.h"
#include "cuda/tp/collectives.h"
#include "cuda/tp/tp_backends.h"
#include "runtime/error.h"
#include "runtime/make_model.h"
#include "runtime/model_loader.h"
#include "runtime/sampler.h"
#include "runtime/tp_shard.h"

namespace strata::cuda {

namespace {

using bf16 = __nv_bfloat16;

// Pinned host staging (metadata uploads and graph replays read from here).
template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  explicit PinnedArray(std::size_t n) : n_(n) {
    if (n) CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p_), n * sizeof(T)));
  }
  ~PinnedArray() {
    if (p_) cudaFreeHost(p_);
  }
  PinnedArray(PinnedArray&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedArray& operator=(PinnedArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  T* get() const { return p_; }
  T& operator[](std::size_t i) const { return p_[i]; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

struct LayerDev {
  bf16 *input_norm, *post_norm, *qkv, *o, *gate_up, *down;
};

constexpr int kGraphBucketsDefault[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
constexpr int kNumSms = 132;  // H200; only used to size decode splits

std::size_t align_up(std::size_t n, std::size_t a = 256) {
  return (n + a - 1) / a * a;
}

// The state of a layer after this step's own work, before a kShrink (the CPU backend's
// runtime/cpu/attention.cpp::state_after, minus the shrink itself).
LayerSlots state_before_shrink(const LayerSlots& before, int n, bool prefill, int prompt_len) {
  LayerSlots st = before;
  if (!prefill) {
    st.advance_decode();
  } else if (before.direct_prefill(prompt_len)) {
    st.valid += n;
  } else if (before.action == LayerAction::kSelect) {
    st.valid = before.rule.capacity;
    st.ring_pos = 0;
  }
  return st;
}

// Eager sparse work of one layer in one step (device pointers into the step workspace).
struct LayerSparseWork {
  sparse::PrefillParams pre;  // pre.num_seqs == 0: none
  sparse::ShrinkParams shr;   // shr.num_seqs == 0: none
};

}  // namespace

ModelConfig random_model_config(const std::string& spec) {
  if (spec.rfind("random:", 0) != 0)
    throw ConfigError("model.path", "not a random model spec: " + spec);
  std::stringstream ss(spec.substr(7));
  std::string item;
  std::getline(ss, item, ',');
  ModelConfig c = preset_config(item);
  if (c.vocab_size == 0)
    c.vocab_size = 512 + 16;  // small presets: built-in tokenizer size (bench only)
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw ConfigError("model.path", "expected key=value in '" + item + "'");
    const std::string k = item.substr(0, eq);
    int v = 0;
    try {
      v = std::stoi(item.substr(eq + 1));
    } catch (const std::exception&) {
      throw ConfigError("model.path", "bad number in '" + item + "'");
    }
    if (v <= 0) throw ConfigError("model.path", "value must be positive in '" + item + "'");
    if (k == "layers")
      c.num_hidden_layers = v;
    else if (k == "hidden")
      c.hidden_size = v;
    else if (k == "heads")
      c.num_attention_heads = v;
    else if (k == "kv_heads")
      c.num_key_value_heads = v;
    else if (k == "intermediate")
      c.intermediate_size = v;
    else if (k == "head_dim")
      c.head_dim = v;
    else if (k == "vocab")
      c.vocab_size = v;
    else
      throw ConfigError(
          "model.path",
          "unknown key '" + k +
              "' (allowed: layers, hidden, heads, kv_heads, intermediate, head_dim, vocab)");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw ConfigError("model.path", "kv_heads must divide heads");
  return c;
}

struct CudaBackendImpl {
  Config cfg;
  int device = 0;
  ModelConfig mc;
  BackendInfo binfo;
  cudaStream_t stream = nullptr;
  std::unique_ptr<Gemm> gemm;
  DeviceSampler sampler;  // non-greedy rows (cuda/sampling.h)

  // Weights.
  std::vector<DeviceArray<bf16>> owned;  // every weight allocation
  bf16 *embed = nullptr, *final_norm = nullptr, *lm_head = nullptr;
  std::vector<LayerDev> layers;
  std::map<std::string, std::pair<const bf16*, std::size_t>> by_name;  // HF name -> (ptr, elems)
  DeviceArray<double> inv_freq;

  // Limits.
  int max_tokens = 0, max_seqs = 0, pmax = 0, max_tiles = 0, logit_rows = 0;
  int q_dim = 0, kv_dim = 0, qkv_dim = 0;

  // Activations and metadata (fixed addresses: CUDA graphs replay against them).
  DeviceArray<float> resid;
  DeviceArray<bf16> normed, qkv, attn, delta, gu, act, lm_normed;
  DeviceArray<float> logits, part_o, part_ml;
  DeviceArray<int> d_tokens, d_pos, d_seq_of, d_tables, d_row_start, d_nq, d_qpos0, d_tile_seq,
      d_tile_q0, d_q_row, d_seq_len, d_lm_rows, d_argmax;
  PinnedArray<int> h_tokens, h_pos, h_seq_of, h_tables, h_row_start, h_nq, h_qpos0, h_tile_seq,
      h_tile_q0, h_q_row, h_seq_len, h_lm_rows, h_argmax;
  PinnedArray<float> h_logits;
  std::size_t activation_bytes = 0;
  // Pages written by the step being checked: page_mark[pg] == page_gen (no per-step set).
  std::vector<std::uint32_t> page_mark;
  std::uint32_t page_gen = 0;

  // KV pool.
  DeviceArray<bf16> kv_pool;
  std::size_t kv_bytes = 0;

  // Sparse layers (docs/cuda-backend.md "Sparse layers"). Pages [num_pages, num_pages +
  // scratch_pages) of kv_pool are the backend's prefill scratch (never handed out).
  int scratch_pages = 0;
  DeviceArray<float> score_pool;  // [page][kv_head][16] fp32 per-slot scores
  DeviceArray<float> pre_lse;     // [max_tokens, heads] prefill LSE of sparse layers
  DeviceArray<float> dec_lse;     // [max_seqs, heads] decode LSE
  // Per layer, per decode batch index (fixed addresses, read by the graphs): [L][max_seqs].
  DeviceArray<int> d_slots;
  PinnedArray<int> h_slots;
  DeviceArray<sparse::DecodeSeq> d_dec_seqs;
  PinnedArray<sparse::DecodeSeq> h_dec_seqs;
  // Eager per-step sparse workspace (metadata + kernel scratch), grow-only.
  DeviceArray<unsigned char> sp_ws;
  PinnedArray<unsigned char> sp_meta;

  // Graphs: (bucket size, sparse decode slot bucket or 0) -> executable graph.
  bool use_graphs = true;
  // Graphs also for decode steps with sparse layers (backend.sparse_graphs; off by default:
  // their replay disagrees with eager, issue 9 in docs/cuda-backend.md).
  bool sparse_graphs = false;
  std::vector<int> buckets;
  // Key: every host scalar forward() bakes into a capture: (bucket size, sparse decode slot
  // bucket or 0, decode attention splits, layer taps on).
  std::map<std::tuple<int, int, int, bool>, cudaGraphExec_t> graphs;
  int forced_splits = 0;  // test hook: decode attention splits (0: pick_splits)
  // Layer taps (test hook, issue 9): per layer [max_tokens][qkv_dim] / [max_tokens][q_dim]
  // bf16 and [max_seqs][heads] fp32 copies of the last step's qkv, attention output and
  // decode LSE.
  bool taps = false;
  DeviceArray<bf16> tap_qkv, tap_attn;
  DeviceArray<float> tap_lse;
  int tap_rows = 0, tap_dec_rows = 0;
  bool tap_has_lse = false;
  cudaEvent_t ev0 = nullptr, ev1 = nullptr;

  // Tensor parallelism (docs/tensor-parallel.md): this rank's shard; `mc` holds the rank's
  // LOCAL head and intermediate counts (full vocabulary and hidden size), full_mc the model.
  CudaTpRank tp;
  TpShard shard;
  ModelConfig full_mc;
  DeviceArray<float> logits_local, logits_parts;  // tp > 1: [rows][vocab_slice], [tp][rows][slice]
  // lm_head rows -> logits[n][V] (all-gathered over the vocabulary split when tp > 1).
  void lm_logits(int n);

  CudaBackendImpl(const Config& c, int dev, CudaTpRank tp_rank);
  ~CudaBackendImpl();

  bf16* alloc_weight(std::size_t n) {
    owned.emplace_back(n);
    return owned.back().get();
  }
  void build_weights();
  void random_tensor(bf16* dst, const std::string& name, std::size_t n, float scale, float offset);
  void allocate_workspace();
  void plan_kv_pool();
  void tune_decode_gemms();

  // Forward over the metadata already in the device buffers.
  // work: eager sparse work per layer (nullptr: none; never inside a graph). sparse_decode:
  // run the scored resolve/update kernels on the decode rows (dec_max_slots: update grid).
  void forward(int T, int S_dec, int num_tiles, int num_splits, int n_lm_rows, bool argmax_all,
               const std::vector<LayerSparseWork>* work, bool sparse_decode, int dec_max_slots);
  StepResult step(const StepPlan& plan);
  int pick_splits(int batch, int max_len) const {
    const int by_sms = (4 * kNumSms + batch * mc.num_key_value_heads - 1) /
                       std::max(1, batch * mc.num_key_value_heads);
    const int by_len = std::max(1, (max_len + 255) / 256);
    return std::clamp(std::min(by_sms, by_len), 1, kMaxDecodeSplits);
  }
};

CudaBackendImpl::CudaBackendImpl(const Config& c, int dev, CudaTpRank tp_rank)
    : cfg(c), device(dev), tp(tp_rank) {
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  if (dev < 0 || dev >= n)
    throw ConfigError("backend.devices", "CUDA device " + std::to_string(dev) + " not present (" +
                                             std::to_string(n) + " device(s))");
  CUDA_CHECK(cudaSetDevice(dev));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&ev0));
  CUDA_CHECK(cudaEventCreate(&ev1));
  gemm = std::make_unique<Gemm>(stream);
  build_weights();
  check_head_dim(mc.head_dim, "CUDA backend");
  if (mc.gqa_ratio() > 8)
    throw ConfigError(
        "num_key_value_heads",
        "CUDA backend: GQA ratio " + std::to_string(mc.gqa_ratio()) + " > 8 is not supported");
  allocate_workspace();
  if (tp.size > 1) {
    logits_local = DeviceArray<float>(static_cast<std::size_t>(logit_rows) * shard.vocab_slice);
    logits_parts =
        DeviceArray<float>(static_cast<std::size_t>(tp.size) * logit_rows * shard.vocab_slice);
  }
  use_graphs = cfg.backend.cuda_graphs;
  sparse_graphs = cfg.backend.sparse_graphs;
  if (tp.comm && !tp.comm->capturable()) use_graphs = false;  // host-staged collectives
  if (!cfg.backend.graph_batch_sizes.empty()) {
    buckets = cfg.backend.graph_batch_sizes;
  } else {
    buckets.assign(std::begin(kGraphBucketsDefault), std::end(kGraphBucketsDefault));
  }
  std::erase_if(buckets, [&](int b) { return b <= 0 || b > max_seqs; });
  std::sort(buckets.begin(), buckets.end());
  tune_decode_gemms();  // before the KV pool takes the free memory (temporary buffers)
  plan_kv_pool();
  binfo.name = tp.size == 1 ? "cuda" : "cuda-tp" + std::to_string(tp.size);
  binfo.layout = KvLayout{mc.num_key_value_heads, mc.head_dim, 2};  // local KV heads
  binfo.tp_size = tp.size;
}

CudaBackendImpl::~CudaBackendImpl() {
  cudaSetDevice(device);
  for (auto& [k, g] : graphs) cudaGraphExecDestroy(g);
  if (ev0) cudaEventDestroy(ev0);
  if (ev1) cudaEventDestroy(ev1);
  gemm.reset();
  if (stream) cudaStreamDestroy(stream);
}

void CudaBackendImpl::random_tensor(bf16* dst, const std::string& name, std::size_t n, float scale,
                                    float offset) {
  launch_random_fill({dst, static_cast<long long>(n), cfg.model.seed, fnv1a(name), scale, offset},
                     stream);
  by_name[name] = {dst, n};
}

void CudaBackendImpl::build_weights() {
  const bool random = cfg.model.path.rfind("random:", 0) == 0;
  std::unique_ptr<ModelWeights> mw;
  if (random) {
    mc = random_model_config(cfg.model.path);
  } else {
    mw = ModelWeights::load(cfg.model.path);
    mc = mw->config();
  }
  full_mc = mc;
  shard = make_tp_shard(mc, tp.rank, tp.size);  // ConfigError when mc cannot be split
  if (tp.size > 1) {
    mc.num_attention_heads = shard.q_heads;
    mc.num_key_value_heads = shard.kv_heads;
    mc.intermediate_size = shard.inter;
  }
  const std::size_t h = mc.hidden_size, in = mc.intermediate_size, V = mc.vocab_size;
  q_dim = mc.q_dim(), kv_dim = mc.kv_dim(), qkv_dim = q_dim + 2 * kv_dim;
  // Weight upload: tensor by HF name into dst (n elements), converted to bf16 on the host.
  std::vector<std::uint16_t> staging;
  auto upload = [&](bf16* dst, const std::string& name, std::size_t n) {
    const TensorView& t = mw->tensor(name);
    if (static_cast<std::size_t>(t.numel()) != n)
      throw ModelError(t.file + ": tensor " + name + " has " + std::to_string(t.numel()) +
                       " elements, expected " + std::to_string(n));
    const void* src = t.data;
    if (t.dtype != DType::kBF16) {
      const std::vector<float> f = t.to_float();
      staging.resize(n);
      for (std::size_t i = 0; i < n; ++i) staging[i] = float_to_bf16(f[i]);
      src = staging.data();
    }
    CUDA_CHECK(cudaMemcpy(dst, src, n * 2, cudaMemcpyHostToDevice));
    by_name[name] = {dst, n};
  };
  std::function<void(bf16*, const std::string&, std::size_t, float, float)> tensor =
      [&](bf16* dst, const std::string& name, std::size_t n, float scale, float offset) {
        if (random)
          random_tensor(dst, name, n, scale, offset);
        else
          upload(dst, name, n);
      };
  if (tp.size > 1)
    tensor = tp::sliced_weight_loader(
        std::move(tensor),
        tp::SliceContext{full_mc, shard, random, mw.get(), stream,
                         [this](bf16* d, const std::string& nm, std::size_t n, float sc,
                                float off) { random_tensor(d, nm, n, sc, off); },
                         [this](const std::string& nm, const bf16* d, std::size_t n) {
                           by_name[nm] = {d, n};
                         }});
  const float lin = 1.0f / std::sqrt(static_cast<float>(h));
  embed = alloc_weight(V * h);
  tensor(embed, "model.embed_tokens.weight", V * h, 1.0f, 0.0f);
  for (int l = 0; l < mc.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerDev d{};
    d.input_norm = alloc_weight(h);
    d.post_norm = alloc_weight(h);
    d.qkv = alloc_weight(qkv_dim * h);
    d.o = alloc_weight(h * q_dim);
    d.gate_up = alloc_weight(2 * in * h);
    d.down = alloc_weight(h * in);
    tensor(d.input_norm, p + "input_layernorm.weight", h, 0.1f, 1.0f);
    tensor(d.qkv, p + "self_attn.q_proj.weight", q_dim * h, lin, 0.0f);
    tensor(d.qkv + q_dim * h, p + "self_attn.k_proj.weight", kv_dim * h, lin, 0.0f);
    tensor(d.qkv + (q_dim + kv_dim) * h, p + "self_attn.v_proj.weight", kv_dim * h, lin, 0.0f);
    tensor(d.o, p + "self_attn.o_proj.weight", h * q_dim,
           1.0f / std::sqrt(static_cast<float>(full_mc.q_dim())), 0.0f);  // whole-model scale
    tensor(d.post_norm, p + "post_attention_layernorm.weight", h, 0.1f, 1.0f);
    tensor(d.gate_up, p + "mlp.gate_proj.weight", in * h, lin, 0.0f);
    tensor(d.gate_up + in * h, p + "mlp.up_proj.weight", in * h, lin, 0.0f);
    tensor(d.down, p + "mlp.down_proj.weight", h * in,
           1.0f / std::sqrt(static_cast<float>(full_mc.intermediate_size)), 0.0f);
    layers.push_back(d);
  }
  final_norm = alloc_weight(h);
  tensor(final_norm, "model.norm.weight", h, 0.1f, 1.0f);
  if (tp.size > 1) {
    // The rank's vocabulary slice, padded with zero rows to vocab_slice (equal all-gathers).
    const std::size_t vs = shard.vocab_slice, vl = shard.vocab;
    lm_head = alloc_weight(vs * h);
    CUDA_CHECK(cudaMemsetAsync(lm_head, 0, vs * h * 2, stream));
    if (mc.tie_word_embeddings)
      CUDA_CHECK(cudaMemcpyAsync(lm_head, embed + static_cast<std::size_t>(shard.vocab_begin) * h,
                                 vl * h * 2, cudaMemcpyDeviceToDevice, stream));
    else if (vl > 0)
      tensor(lm_head, "lm_head.weight", vl * h, lin, 0.0f);
  } else if (mc.tie_word_embeddings) {
    lm_head = embed;
  } else {
    lm_head = alloc_weight(V * h);
    tensor(lm_head, "lm_head.weight", V * h, lin, 0.0f);
  }
  const std::vector<double> inv = mc.rope_inv_freq();
  inv_freq = DeviceArray<double>(inv.size());
  CUDA_CHECK(
      cudaMemcpy(inv_freq.get(), inv.data(), inv.size() * sizeof(double), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::size_t bytes = 0;
  for (const auto& a : owned) bytes += a.bytes();
  binfo.weight_bytes = bytes;
}

void CudaBackendImpl::allocate_workspace() {
  std::size_t before_free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&before_free, &total));
  max_tokens = std::max(cfg.scheduler.max_num_batched_tokens, 1);
  max_seqs = std::max(cfg.scheduler.max_num_seqs, 1);
  max_tokens = std::max(max_tokens, max_seqs);
  const std::int64_t model_len =
      cfg.model.max_model_len > 0 ? cfg.model.max_model_len : mc.max_position_embeddings;
  pmax = static_cast<int>((model_len + kBlockSize - 1) / kBlockSize);
  max_tiles = max_tokens / 64 + max_seqs + 1;
  logit_rows = std::max(256, max_seqs);
  const std::size_t T = max_tokens, H = mc.hidden_size, I = mc.intermediate_size, V = mc.vocab_size;
  resid = DeviceArray<float>(T * H);
  normed = DeviceArray<bf16>(T * H);
  qkv = DeviceArray<bf16>(T * qkv_dim);
  attn = DeviceArray<bf16>(T * q_dim);
  delta = DeviceArray<bf16>(T * H);
  gu = DeviceArray<bf16>(T * 2 * I);
  act = DeviceArray<bf16>(T * I);
  lm_normed = DeviceArray<bf16>(static_cast<std::size_t>(logit_rows) * H);
  logits = DeviceArray<float>(static_cast<std::size_t>(logit_rows) * V);
  part_o = DeviceArray<float>(static_cast<std::size_t>(max_seqs) * mc.num_attention_heads *
                              kMaxDecodeSplits * mc.head_dim);
  part_ml = DeviceArray<float>(static_cast<std::size_t>(max_seqs) * mc.num_attention_heads *
                               kMaxDecodeSplits * 2);
  const std::size_t tables = static_cast<std::size_t>(max_seqs) * mc.num_hidden_layers * pmax;
  auto both = [](DeviceArray<int>& d, PinnedArray<int>& h, std::size_t n) {
    d = DeviceArray<int>(n);
    h = PinnedArray<int>(n);
  };
  both(d_tokens, h_tokens, T);
  both(d_pos, h_pos, T);
  both(d_seq_of, h_seq_of, T);
  both(d_tables, h_tables, tables);
  both(d_row_start, h_row_start, max_seqs);
  both(d_nq, h_nq, max_seqs);
  both(d_qpos0, h_qpos0, max_seqs);
  both(d_tile_seq, h_tile_seq, max_tiles);
  both(d_tile_q0, h_tile_q0, max_tiles);
  both(d_q_row, h_q_row, max_seqs);
  const std::size_t per_layer = static_cast<std::size_t>(mc.num_hidden_layers) * max_seqs;
  both(d_seq_len, h_seq_len, per_layer);
  both(d_slots, h_slots, per_layer);
  d_dec_seqs = DeviceArray<sparse::DecodeSeq>(per_layer);
  h_dec_seqs = PinnedArray<sparse::DecodeSeq>(per_layer);
  pre_lse = DeviceArray<float>(T * mc.num_attention_heads);
  dec_lse = DeviceArray<float>(static_cast<std::size_t>(max_seqs) * mc.num_attention_heads);
  both(d_lm_rows, h_lm_rows, T);
  both(d_argmax, h_argmax, logit_rows);
  h_logits = PinnedArray<float>(static_cast<std::size_t>(logit_rows) * V);
  CUDA_CHECK(cudaMemsetAsync(d_tables.get(), 0, d_tables.bytes(), stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::size_t after_free = 0;
  CUDA_CHECK(cudaMemGetInfo(&after_free, &total));
  activation_bytes = before_free > after_free ? before_free - after_free : 0;
}

// Decode GEMM autotuning (cuda/gemm.h): every linear layer shape at every graph bucket's row
// count (the decode graphs run exactly those T), for models of >= 1 GiB of weights (where
// decode is weight-bandwidth bound; small test models keep bit-identical eager/graph GEMMs).
// STRATA_GEMM_AUTOTUNE=0 keeps cuBLAS's defaults, =1 tunes any model. The choices are logged
// on stderr, one line per shape and row count.
void CudaBackendImpl::tune_decode_gemms() {
  const char* env = std::getenv("STRATA_GEMM_AUTOTUNE");
  const std::string mode = env ? env : "";
  if (mode == "0" || buckets.empty() || layers.empty()) return;
  if (mode != "1" && binfo.weight_bytes < (1ull << 30)) return;
  const int H = mc.hidden_size, I = mc.intermediate_size, V = mc.vocab_size;
  const LayerDev& w = layers.front();
  const std::vector<GemmShape> shapes = {
      {"qkv", qkv_dim, H, false, w.qkv},
      {"o", H, q_dim, false, w.o},
      {"gate_up", 2 * I, H, false, w.gate_up},
      {"down", H, I, false, w.down},
      // tp > 1: the rank's vocabulary slice of rows
      {"lm_head", tp.size > 1 ? shard.vocab_slice : V, H, true, lm_head}};
  std::vector<int> rows;
  for (int b : buckets)
    if (b <= std::min(max_tokens, logit_rows)) rows.push_back(b);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<GemmTuneResult> res;
  try {
    res = gemm->autotune(shapes, rows, 1000.0);
  } catch (const std::exception& e) {  // tuning is an optimisation: keep what was verified
    cudaGetLastError();
    std::fprintf(stderr, "strata cuda: decode GEMM autotune stopped (%s); %d plans kept\n",
                 e.what(), gemm->tuned_count());
    return;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr,
               "strata cuda: decode GEMM autotune %.0f ms, %d of %zu (shape, rows) use cublasLt\n",
               ms, gemm->tuned_count(), res.size());
  for (const GemmTuneResult& r : res)
    std::fprintf(stderr,
                 "strata cuda:   %-8s N=%-6d K=%-6d T=%-4d default %8.1f us -> %8.1f us  %s (%d "
                 "candidates, %d rejected)\n",
                 r.name.c_str(), r.N, r.K, r.T, r.default_us, r.best_us, r.chosen.c_str(),
                 r.candidates, r.rejected);
}

void CudaBackendImpl::plan_kv_pool() {
  const KvLayout layout{mc.num_key_value_heads, mc.head_dim, 2};
  std::size_t free_b = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  const std::size_t headroom = 256ull << 20;  // graphs, cuBLAS internals, driver
  std::size_t budget =
      free_b > headroom ? static_cast<std::size_t>((free_b - headroom) * cfg.cache.kv_fraction) : 0;
  if (cfg.cache.kv_bytes > 0) budget = std::min<std::size_t>(budget, cfg.cache.kv_bytes);
  // Every page carries its fp32 slot scores (sparse layers); the prefill scratch (a whole
  // step's tokens laid out as pages) comes from the same budget.
  scratch_pages = pages_for_slots(max_tokens) + max_seqs;
  const std::size_t per_page = layout.page_bytes() + layout.score_elems() * sizeof(float);
  const std::size_t all_pages = budget / per_page;
  const std::size_t pages =
      all_pages > static_cast<std::size_t>(scratch_pages) ? all_pages - scratch_pages : 0;
  if (pages < static_cast<std::size_t>(mc.num_hidden_layers))
    throw ConfigError("cache.kv_bytes",
                      "KV pool of " + std::to_string(budget) + " bytes holds " +
                          std::to_string(pages) + " pages of " +
                          std::to_string(layout.page_bytes()) + " (+" +
                          std::to_string(layout.score_elems() * sizeof(float)) +
                          " score bytes) after " + std::to_string(scratch_pages) +
                          " scratch pages: fewer than one per layer (free device memory " +
                          std::to_string(free_b) + " bytes)");
  const std::size_t n_pages = std::min<std::size_t>(pages, 0x7fffffff - scratch_pages);
  const std::size_t with_scratch = n_pages + scratch_pages;
  kv_pool = DeviceArray<bf16>(with_scratch * layout.page_elems());
  score_pool = DeviceArray<float>(with_scratch * layout.score_elems());
  // The pool starts as zeros (K/V and scores), so results never depend on what the device
  // memory held before. STRATA_CUDA_POOL_POISON=1 fills it with NaN bits instead: every read
  // of a slot that was never written (K/V, or a sparse layer's score) then turns into NaN
  // logits (tests/gpu/sparse_model_test.cpp, NoReadOfUnwrittenSlots).
  const char* poison_env = std::getenv("STRATA_CUDA_POOL_POISON");
  const int fill = poison_env && std::string(poison_env) == "1" ? 0xFF : 0;
  CUDA_CHECK(cudaMemsetAsync(kv_pool.get(), fill, kv_pool.bytes(), stream));
  CUDA_CHECK(cudaMemsetAsync(score_pool.get(), fill, score_pool.bytes(), stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  kv_bytes = kv_pool.bytes() + score_pool.bytes();
  binfo.num_pages = static_cast<int>(n_pages);
}

void CudaBackendImpl::forward(int T, int S_dec, int num_tiles, int num_splits, int n_lm_rows,
                              bool argmax_all, const std::vector<LayerSparseWork>* work,
                              bool sparse_decode, int dec_max_slots) {
  const int H = mc.hidden_size, I = mc.intermediate_size, V = mc.vocab_size,
            L = mc.num_hidden_layers;
  const float eps = static_cast<float>(mc.rms_norm_eps);
  const long long page_elems = static_cast<long long>(binfo.layout.page_elems());
  const float scale = 1.0f / std::sqrt(static_cast<float>(mc.head_dim));
  launch_embedding({d_tokens.get(), embed, resid.get(), T, H}, stream);
  for (int l = 0; l < L; ++l) {
    const LayerDev& w = layers[static_cast<std::size_t>(l)];
    const int* table = d_tables.get() + static_cast<std::size_t>(l) * pmax;
    const int table_stride = L * pmax;
    launch_rmsnorm({resid.get(), l == 0 ? nullptr : delta.get(), w.input_norm, normed.get(),
                    nullptr, T, H, eps},
                   stream);
    gemm->linear(normed.get(), w.qkv, qkv.get(), T, qkv_dim, H);
    const std::size_t lrow = static_cast<std::size_t>(l) * max_seqs;
    // Decode of sparse layers (docs/cuda-sparsity.md step 4): per-sequence DecodeSeqs of this
    // layer (policy 0 for full layers and padding rows) in the decode batch order.
    sparse::DecodeParams dp;
    const bool sp_dec = sparse_decode && S_dec > 0;
    if (sp_dec) {
      dp.seqs = d_dec_seqs.get() + lrow;
      dp.num_seqs = S_dec;
      dp.max_slots = dec_max_slots;
      dp.q_heads = mc.num_attention_heads;
      dp.kv_heads = mc.num_key_value_heads;
      dp.head_dim = mc.head_dim;
      dp.scale = scale;
      dp.pool = kv_pool.get();
      dp.scores = score_pool.get();
      dp.pages = d_tables.get();
      dp.page_elems = static_cast<std::size_t>(page_elems);
      dp.q = qkv.get();
      dp.q_stride = qkv_dim;
      dp.lse = dec_lse.get();
      // `scored` with a full ring: the oldest ring token moves (or is dropped) BEFORE the new
      // token overwrites its slot. Reads only the pool, not this step's qkv.
      CUDA_CHECK(sparse::launch_scored_resolve(dp, stream));
    }
    RopeKvParams rp{qkv.get(),
                    d_pos.get(),
                    d_seq_of.get(),
                    table,
                    table_stride,
                    inv_freq.get(),
                    kv_pool.get(),
                    page_elems,
                    T,
                    mc.num_attention_heads,
                    mc.num_key_value_heads,
                    mc.head_dim};
    // Decode rows write K/V at LayerSlots::decode_slot() (= position on full layers).
    rp.slots = d_slots.get() + lrow;
    rp.num_slot_rows = S_dec;
    launch_rope_kv_write(rp, stream);
    const LayerSparseWork* lw = work ? &(*work)[static_cast<std::size_t>(l)] : nullptr;
    // Attention of layer l. Decode rows attend seq_len[l][b] slots: position + 1 on full
    // layers, the sparse layer's attended slots (C when the ring is full, else valid + 1).
    // Prefill rows attend through this layer's table: own pages (full / direct), temp pages
    // or scratch (sparse layer, prompt longer than C).
    if (S_dec > 0)
      launch_decode_attention({qkv.get(),
                               qkv_dim,
                               d_q_row.get(),
                               kv_pool.get(),
                               page_elems,
                               table,
                               table_stride,
                               d_seq_len.get() + lrow,
                               S_dec,
                               num_splits,
                               part_o.get(),
                               part_ml.get(),
                               attn.get(),
                               q_dim,
                               sp_dec ? dec_lse.get() : nullptr,
                               nullptr,
                               0,
                               mc.num_attention_heads,
                               mc.num_key_value_heads,
                               mc.head_dim,
                               scale},
                              stream);
    if (sp_dec) CUDA_CHECK(sparse::launch_scored_update(dp, stream));
    const bool sp_pre = lw && lw->pre.num_seqs > 0;
    if (num_tiles > 0)
      launch_prefill_attention(
          {qkv.get(), qkv_dim, kv_pool.get(), page_elems, table, table_stride, d_row_start.get(),
           d_nq.get(), d_qpos0.get(), d_tile_seq.get(), d_tile_q0.get(), num_tiles, attn.get(),
           q_dim, sp_pre ? pre_lse.get() : nullptr, mc.num_attention_heads, mc.num_key_value_heads,
           mc.head_dim, scale},
          stream);
    // Sparse prefill (docs/cuda-sparsity.md steps 1-3): kSelect scores the window queries of
    // this chunk against the prompt in temp pages / scratch, selects and compacts into the
    // layer's pages; direct chunks advance the score averages.
    if (sp_pre) CUDA_CHECK(sparse::launch_sparse_prefill(lw->pre, stream));
    // Live shrink after the layer's own work (step 5).
    if (lw && lw->shr.num_seqs > 0) CUDA_CHECK(sparse::launch_sparse_shrink(lw->shr, stream));
    if (taps) {  // test hook: this layer's attention inputs and outputs (capturable copies)
      const std::size_t lt = static_cast<std::size_t>(l) * max_tokens;
      CUDA_CHECK(cudaMemcpyAsync(tap_qkv.get() + lt * qkv_dim, qkv.get(),
                                 static_cast<std::size_t>(T) * qkv_dim * sizeof(bf16),
                                 cudaMemcpyDeviceToDevice, stream));
      CUDA_CHECK(cudaMemcpyAsync(tap_attn.get() + lt * q_dim, attn.get(),
                                 static_cast<std::size_t>(T) * q_dim * sizeof(bf16),
                                 cudaMemcpyDeviceToDevice, stream));
      if (sp_dec)
        CUDA_CHECK(cudaMemcpyAsync(
            tap_lse.get() + static_cast<std::size_t>(l) * max_seqs * mc.num_attention_heads,
            dec_lse.get(), static_cast<std::size_t>(S_dec) * mc.num_attention_heads * sizeof(float),
            cudaMemcpyDeviceToDevice, stream));
    }
    gemm->linear(attn.get(), w.o, delta.get(), T, H, q_dim);
    if (tp.comm) tp.comm->all_reduce_bf16(delta.get(), static_cast<std::size_t>(T) * H, stream);
    launch_rmsnorm({resid.get(), delta.get(), w.post_norm, normed.get(), nullptr, T, H, eps},
                   stream);
    gemm->linear(normed.get(), w.gate_up, gu.get(), T, 2 * I, H);
    launch_swiglu({gu.get(), act.get(), T, I}, stream);
    gemm->linear(act.get(), w.down, delta.get(), T, H, I);
    if (tp.comm) tp.comm->all_reduce_bf16(delta.get(), static_cast<std::size_t>(T) * H, stream);
  }
  // Final norm only for the rows whose logits are needed (first chunk; step() loops more).
  const int n = std::min(n_lm_rows, logit_rows);
  launch_rmsnorm(
      {resid.get(), delta.get(), final_norm, lm_normed.get(), d_lm_rows.get(), n, H, eps}, stream);
  lm_logits(n);
  if (argmax_all) launch_argmax({logits.get(), d_argmax.get(), n, V}, stream);
}

void CudaBackendImpl::lm_logits(int n) {
  const int H = mc.hidden_size, V = mc.vocab_size;
  if (!tp.comm) {
    gemm->linear_f32out(lm_normed.get(), lm_head, logits.get(), n, V, H);
    return;
  }
  const int vs = shard.vocab_slice;
  gemm->linear_f32out(lm_normed.get(), lm_head, logits_local.get(), n, vs, H);
  tp::gather_vocab_logits(*tp.comm, full_mc, logits_local.get(), logits_parts.get(), logits.get(),
                          n, stream);
}

StepResult CudaBackendImpl::step(const StepPlan& plan) {
  const auto wall0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaSetDevice(device));
  const int L = mc.num_hidden_layers, V = mc.vocab_size;
  const int S = static_cast<int>(plan.seqs.size());
  StepResult result;
  result.step_id = plan.step_id;
  result.seqs.resize(static_cast<std::size_t>(S));
  if (S == 0) return result;
  if (S > max_seqs)
    throw InternalError("CUDA backend: step has " + std::to_string(S) +
                        " sequences, max_num_seqs is " + std::to_string(max_seqs));

  // Validate and order: decode-kernel rows first (single tokens: decodes, and one-token
  // prefill chunks whose sparse layers all hold the prompt directly), then prefill chunks.
  auto is_dec = [&](const SeqStep& s) {
    if (s.tokens.size() != 1) return false;
    if (!s.prefill) return true;
    for (const LayerSlots& ls : s.layers)
      if (ls.rule.sparse() &&
          (!ls.direct_prefill(s.prompt_len) || ls.action == LayerAction::kSelect))
        return false;
    return true;
  };
  std::vector<int> order;
  std::vector<char> dec_row(static_cast<std::size_t>(S));
  int T = 0, max_pages = 1;
  if (page_mark.size() != static_cast<std::size_t>(binfo.num_pages) || ++page_gen == 0) {
    page_mark.assign(static_cast<std::size_t>(binfo.num_pages), 0);
    page_gen = 1;
  }
  for (int i = 0; i < S; ++i)
    dec_row[static_cast<std::size_t>(i)] = is_dec(plan.seqs[static_cast<std::size_t>(i)]);
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < S; ++i)
      if ((dec_row[static_cast<std::size_t>(i)] != 0) == (pass == 0)) order.push_back(i);
  bool any_sparse_prefill = false, any_shrink = false;
  for (int i = 0; i < S; ++i) {
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    const int n = static_cast<int>(s.tokens.size());
    const bool dec = dec_row[static_cast<std::size_t>(i)] != 0;
    if (n == 0)
      throw InternalError("CUDA backend: sequence " + std::to_string(s.seq_id) + " has no tokens");
    if (static_cast<int>(s.layers.size()) != L)
      throw InternalError("CUDA backend: sequence " + std::to_string(s.seq_id) + " has " +
                          std::to_string(s.layers.size()) + " layer entries, model has " +
                          std::to_string(L));
    if (s.start < 0 || s.start + n > pmax * kBlockSize)
      throw InvalidRequest("prompt", "sequence length " + std::to_string(s.start + n) +
                                         " exceeds max_model_len " +
                                         std::to_string(pmax * kBlockSize));
    for (int tok : s.tokens)
      if (tok < 0 || tok >= V)
        throw InvalidRequest("prompt", "token id " + std::to_string(tok) +
                                           " outside the vocabulary (" + std::to_string(V) + ")");
    const int need = pages_for_slots(s.start + n);
    for (int l = 0; l < L; ++l) {
      const LayerSlots& ls = s.layers[static_cast<std::size_t>(l)];
      const LayerRule& r = ls.rule;
      // Built only when a check fails (a decode step at batch 64 has 2,048 (sequence, layer)
      // pairs; they used to build one string each).
      auto who = [&] {
        return "CUDA backend: sequence " + std::to_string(s.seq_id) + " layer " + std::to_string(l);
      };
      auto check_table = [&](const std::vector<std::int32_t>& t, int pages, const char* what) {
        if (static_cast<int>(t.size()) < pages)
          throw InternalError(who() + " " + what + " has " + std::to_string(t.size()) +
                              " pages, needs " + std::to_string(pages));
        for (int pg : t)
          if (pg < 0 || pg >= binfo.num_pages)
            throw InternalError("CUDA backend: page id " + std::to_string(pg) +
                                " outside the pool (" + std::to_string(binfo.num_pages) +
                                " pages)");
      };
      auto mark_written = [&](const std::vector<std::int32_t>& t, int first, int end) {
        for (int pi = first; pi < end; ++pi)
          if (std::exchange(page_mark[static_cast<std::size_t>(t[static_cast<std::size_t>(pi)])],
                            page_gen) == page_gen)
            throw InternalError("CUDA backend: page " +
                                std::to_string(t[static_cast<std::size_t>(pi)]) +
                                " written twice in one step");
      };
      if (!r.sparse()) {
        if (ls.action != LayerAction::kNone)
          throw InternalError(who() + ": kSelect/kShrink on a full-cache layer");
        check_table(ls.pages, need, "page table");
        mark_written(ls.pages, s.start / kBlockSize, need);
        continue;
      }
      if (r.window <= 0 || r.capacity < r.sinks + r.window + 1 || r.ring < 0 ||
          r.ring > r.capacity - r.sinks)
        throw InternalError(who() + ": bad sparse rule (capacity " + std::to_string(r.capacity) +
                            ", sinks " + std::to_string(r.sinks) + ", window " +
                            std::to_string(r.window) + ", ring " + std::to_string(r.ring) + ")");
      if (dec) {
        if (ls.valid < 0 || (r.policy != Policy::kSnapKv && ls.valid > r.capacity) ||
            (r.ring > 0 && (ls.ring_pos < 0 || ls.ring_pos >= r.ring)))
          throw InternalError(who() + ": bad decode state (valid " + std::to_string(ls.valid) +
                              ", ring_pos " + std::to_string(ls.ring_pos) + ")");
        if (ls.action == LayerAction::kSelect)
          throw InternalError(who() + ": kSelect in a decode step");
        const int slot = ls.decode_slot();
        const int att = ls.ring_full() ? r.capacity : ls.valid + 1;
        check_table(ls.pages, pages_for_slots(std::max(att, slot + 1)), "page table");
        mark_written(ls.pages, slot / kBlockSize, slot / kBlockSize + 1);
      } else if (ls.direct_prefill(s.prompt_len)) {
        if (ls.action == LayerAction::kSelect)
          throw InternalError(who() + ": kSelect with a prompt that fits the capacity");
        check_table(ls.pages, need, "page table");
        mark_written(ls.pages, s.start / kBlockSize, need);
        any_sparse_prefill = true;
      } else {
        const bool final_chunk = s.start + n == s.prompt_len;
        if (ls.temp_pages.empty()) {
          if (ls.action != LayerAction::kSelect || s.start != 0 || !final_chunk)
            throw InternalError(who() + ": prompt of " + std::to_string(s.prompt_len) +
                                " tokens exceeds capacity " + std::to_string(r.capacity) +
                                " but the step holds [" + std::to_string(s.start) + ", " +
                                std::to_string(s.start + n) +
                                ") without temp pages (scratch needs the whole prompt + kSelect)");
        } else {
          check_table(ls.temp_pages, need, "temp page table");
          mark_written(ls.temp_pages, s.start / kBlockSize, need);
        }
        if (ls.action == LayerAction::kSelect) {
          if (!final_chunk || n < std::min(r.window, s.prompt_len))
            throw InternalError(who() + ": kSelect needs the final chunk holding the last " +
                                std::to_string(r.window) + " positions (chunk [" +
                                std::to_string(s.start) + ", " + std::to_string(s.start + n) +
                                ") of " + std::to_string(s.prompt_len) + ")");
          check_table(ls.pages, pages_for_slots(r.capacity), "page table");
          mark_written(ls.pages, 0, pages_for_slots(r.capacity));
          any_sparse_prefill = true;
        }
      }
      if (ls.action == LayerAction::kShrink) {
        const LayerSlots post = state_before_shrink(ls, n, s.prefill, s.prompt_len);
        if (ls.shrink_to <= r.sinks + r.window)
          throw InternalError(who() + ": kShrink to " + std::to_string(ls.shrink_to) +
                              " slots (must exceed sinks + window)");
        check_table(ls.pages, pages_for_slots(std::min(post.valid, ls.shrink_to)), "page table");
        any_shrink = true;
      }
    }
    max_pages = std::max(max_pages, need);
    T += n;
  }
  if (T > max_tokens)
    throw InternalError("CUDA backend: step has " + std::to_string(T) +
                        " tokens, max_num_batched_tokens is " + std::to_string(max_tokens));

  // Metadata into pinned staging.
  int S_dec = 0, num_tiles = 0, max_len = 0, row = 0, dec_max_slots = 0, scratch_used = 0;
  bool sparse_decode = false;
  std::vector<int> first_row(static_cast<std::size_t>(S));
  std::vector<std::vector<sparse::PrefillInput>> pre_in(static_cast<std::size_t>(L));
  for (int k = 0; k < S; ++k) {
    const int i = order[static_cast<std::size_t>(k)];
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    const int n = static_cast<int>(s.tokens.size());
    const bool dec = dec_row[static_cast<std::size_t>(i)] != 0;
    first_row[static_cast<std::size_t>(i)] = row;
    for (int t = 0; t < n; ++t) {
      h_tokens[row + t] = s.tokens[static_cast<std::size_t>(t)];
      h_pos[row + t] = s.start + t;
      h_seq_of[row + t] = k;
    }
    // Scratch pages of this sequence (shared by its layers: they run one after another).
    std::vector<std::int32_t> scratch_ids;
    for (const LayerSlots& ls : s.layers)
      if (!dec && ls.rule.sparse() && !ls.direct_prefill(s.prompt_len) && ls.temp_pages.empty()) {
        const int np = pages_for_slots(n);
        if (scratch_used + np > scratch_pages)
          throw InternalError("CUDA backend: prefill scratch exhausted (" +
                              std::to_string(scratch_used + np) + " > " +
                              std::to_string(scratch_pages) + " pages)");
        for (int pi = 0; pi < np; ++pi) scratch_ids.push_back(binfo.num_pages + scratch_used + pi);
        scratch_used += np;
        break;
      }
    for (int l = 0; l < L; ++l) {
      const LayerSlots& ls = s.layers[static_cast<std::size_t>(l)];
      const bool via_temp = !dec && ls.rule.sparse() && !ls.direct_prefill(s.prompt_len);
      const std::vector<std::int32_t>& tab =
          via_temp ? (ls.temp_pages.empty() ? scratch_ids : ls.temp_pages) : ls.pages;
      const int cnt = std::min<int>(static_cast<int>(tab.size()), max_pages);
      int* trow = &h_tables[(static_cast<std::size_t>(k) * L + l) * max_pages];
      std::memcpy(trow, tab.data(), cnt * sizeof(int));
      // Entries past the table: page 0, not whatever an earlier step left in the staging (no
      // kernel reads them: sparse::check_decode_reads and the checks above hold every read
      // inside [0, cnt)), so the uploaded table is a function of this step's plan only.
      std::fill(trow + cnt, trow + max_pages, 0);
      if (!dec && ls.rule.sparse()) {
        if (ls.direct_prefill(s.prompt_len)) {
          sparse::PrefillInput in;
          in.rule = ls.rule;
          in.prompt_len = s.start + n;
          in.direct = true;
          in.chunk_start = s.start;
          in.last_row = row + n - 1;
          in.dst_pages = ls.pages;
          pre_in[static_cast<std::size_t>(l)].push_back(std::move(in));
        } else if (ls.action == LayerAction::kSelect) {
          sparse::PrefillInput in;
          in.rule = ls.rule;
          in.prompt_len = s.prompt_len;
          in.last_row = row + n - 1;
          in.src_pages = ls.temp_pages.empty() ? scratch_ids : ls.temp_pages;
          in.dst_pages = ls.pages;
          pre_in[static_cast<std::size_t>(l)].push_back(std::move(in));
        }
      }
    }
    if (dec) {
      h_q_row[S_dec] = row;
      max_len = std::max(max_len, s.start + 1);
      for (int l = 0; l < L; ++l) {
        const LayerSlots& ls = s.layers[static_cast<std::size_t>(l)];
        const std::size_t at = static_cast<std::size_t>(l) * max_seqs + S_dec;
        const sparse::DecodeLayerMeta m =
            sparse::decode_layer_meta(ls, s.start, (k * L + l) * pmax, row);
        // Every slot and table entry the decode kernels read is held or written this step.
        sparse::check_decode_reads(ls, s.start, m,
                                   std::min<int>(static_cast<int>(ls.pages.size()), max_pages));
        h_seq_len[at] = m.seq_len;
        h_slots[at] = m.slot;
        h_dec_seqs[at] = m.seq;
        if (ls.rule.sparse()) {
          dec_max_slots = std::max(dec_max_slots, m.seq_len);
          sparse_decode = true;
        }
      }
      ++S_dec;
    } else {
      h_row_start[k] = row, h_nq[k] = n, h_qpos0[k] = s.start;
      for (int q0 = 0; q0 < n; q0 += 64)
        h_tile_seq[num_tiles] = k, h_tile_q0[num_tiles] = q0, ++num_tiles;
    }
    row += n;
  }
  // Rows whose logits are needed: the sampled last token, every token with return_logits.
  int n_lm = 0;
  for (int i = 0; i < S; ++i) {
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    const int n = static_cast<int>(s.tokens.size()), r0 = first_row[static_cast<std::size_t>(i)];
    if (s.return_logits) {
      for (int t = 0; t < n; ++t) h_lm_rows[n_lm++] = r0 + t;
    } else if (s.sample) {
      h_lm_rows[n_lm++] = r0 + n - 1;
    }
  }
  auto device_greedy = [&](const SeqStep& s) {
    const SamplingParams* p = s.params;
    return p && p->temperature == 0.0f && p->logprobs < 0 && p->logit_bias.empty() &&
           p->repetition_penalty == 1.0f && p->frequency_penalty == 0.0f &&
           p->presence_penalty == 0.0f &&
           (p->min_tokens == 0 ||
            (s.output && static_cast<int>(s.output->size()) >= p->min_tokens));
  };

  // Decode-only steps replay a CUDA graph of the smallest bucket that fits (steps with a
  // kShrink run eagerly; so do steps whose decode rows touch sparse layers unless
  // backend.sparse_graphs).
  const bool decode_only = num_tiles == 0 && n_lm <= S_dec && !any_shrink;
  int bucket = 0;
  if (use_graphs && decode_only && (!sparse_decode || sparse_graphs))
    for (int b : buckets)
      if (b >= S_dec) {
        bucket = b;
        break;
      }
  auto upload = [&](DeviceArray<int>& d, const PinnedArray<int>& h, int n) {
    if (n > 0)
      CUDA_CHECK(
          cudaMemcpyAsync(d.get(), h.get(), n * sizeof(int), cudaMemcpyHostToDevice, stream));
  };
  int T_run = T, S_run = S_dec, lm_run = n_lm;
  if (bucket > 0) {
    // Pad to the bucket: padding rows are token 0, seq_of -1 (no KV write), seq_len 0.
    for (int b = S_dec; b < bucket; ++b) {
      h_tokens[b] = 0, h_pos[b] = 0, h_seq_of[b] = -1, h_q_row[b] = b;
      for (int l = 0; l < L; ++l) {
        const std::size_t at = static_cast<std::size_t>(l) * max_seqs + b;
        h_seq_len[at] = 0, h_slots[at] = 0, h_dec_seqs[at] = sparse::DecodeSeq{};
      }
    }
    for (int b = 0; b < bucket; ++b) h_lm_rows[b] = b;  // all rows; map results below
    T_run = S_run = lm_run = bucket;
  }
  // Eager sparse work of this step: metadata of every layer (one upload) and kernel scratch
  // shared by the layers (they run one after another on the stream).
  std::vector<LayerSparseWork> work;
  if (any_sparse_prefill || any_shrink) {
    work.resize(static_cast<std::size_t>(L));
    std::vector<unsigned char> meta;
    auto put = [&](const void* src, std::size_t bytes) {
      const std::size_t off = align_up(meta.size());
      meta.resize(off + bytes);
      if (bytes) std::memcpy(meta.data() + off, src, bytes);
      return off;
    };
    struct Offs {
      std::size_t pre_seqs = 0, src = 0, dst = 0, shr_seqs = 0, shr_pages = 0;
    };
    std::vector<Offs> offs(static_cast<std::size_t>(L));
    std::size_t score_floats = 0, kept_elems = 0, stage_slots = 0;
    const int kvh = mc.num_key_value_heads;
    for (int l = 0; l < L; ++l) {
      LayerSparseWork& w = work[static_cast<std::size_t>(l)];
      Offs& o = offs[static_cast<std::size_t>(l)];
      const auto& ins = pre_in[static_cast<std::size_t>(l)];
      if (!ins.empty()) {
        const sparse::PrefillPlan pl = sparse::plan_sparse_prefill(ins, kvh);
        o.pre_seqs = put(pl.seqs.data(), pl.seqs.size() * sizeof(sparse::PrefillSeq));
        o.src = put(pl.src_pages.data(), pl.src_pages.size() * sizeof(std::int32_t));
        o.dst = put(pl.dst_pages.data(), pl.dst_pages.size() * sizeof(std::int32_t));
        w.pre.num_seqs = static_cast<int>(pl.seqs.size());
        w.pre.max_len = pl.max_len;
        w.pre.max_kept = pl.max_kept;
        score_floats = std::max(score_floats, pl.score_floats);
        kept_elems = std::max(kept_elems, pl.kept_elems);
      }
      std::vector<sparse::ShrinkSeq> shr;
      std::vector<std::int32_t> shr_pages;
      std::int64_t stage = 0;
      for (int k = 0; k < S; ++k) {
        const SeqStep& s = plan.seqs[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])];
        const LayerSlots& ls = s.layers[static_cast<std::size_t>(l)];
        if (ls.action != LayerAction::kShrink) continue;
        const LayerSlots post =
            state_before_shrink(ls, static_cast<int>(s.tokens.size()), s.prefill, s.prompt_len);
        shr.push_back(sparse::make_shrink_seq(ls.rule, post.valid, post.ring_pos, ls.shrink_to,
                                              static_cast<int>(shr_pages.size()), stage));
        shr_pages.insert(shr_pages.end(), ls.pages.begin(), ls.pages.end());
        stage += static_cast<std::int64_t>(kvh) * ls.shrink_to;
      }
      if (!shr.empty()) {
        o.shr_seqs = put(shr.data(), shr.size() * sizeof(sparse::ShrinkSeq));
        o.shr_pages = put(shr_pages.data(), shr_pages.size() * sizeof(std::int32_t));
        w.shr.num_seqs = static_cast<int>(shr.size());
        stage_slots = std::max(stage_slots, static_cast<std::size_t>(stage));
      }
    }
    // Scratch after the metadata.
    std::size_t at = align_up(meta.size());
    const std::size_t raw_off = at;
    at = align_up(at + score_floats * sizeof(float));
    const std::size_t pooled_off = at;
    at = align_up(at + score_floats * sizeof(float));
    const std::size_t kidx_off = at;
    at = align_up(at + kept_elems * sizeof(std::int32_t));
    const std::size_t kscore_off = at;
    at = align_up(at + kept_elems * sizeof(float));
    const std::size_t sidx_off = at;
    at = align_up(at + stage_slots * sizeof(std::int32_t));
    const std::size_t skv_off = at;
    at = align_up(at + stage_slots * 2 * mc.head_dim * sizeof(bf16));
    const std::size_t sscore_off = at;
    at = align_up(at + stage_slots * sizeof(float) + 1);
    if (sp_ws.size() < at) {
      sp_ws = DeviceArray<unsigned char>();  // no work in flight: step() syncs before returning
      sp_ws = DeviceArray<unsigned char>(at + at / 4);
    }
    if (sp_meta.size() < meta.size()) sp_meta = PinnedArray<unsigned char>(meta.size() * 2);
    if (!meta.empty()) std::memcpy(sp_meta.get(), meta.data(), meta.size());
    unsigned char* base = sp_ws.get();
    auto f32 = [&](std::size_t off) { return reinterpret_cast<float*>(base + off); };
    auto i32 = [&](std::size_t off) { return reinterpret_cast<std::int32_t*>(base + off); };
    for (int l = 0; l < L; ++l) {
      LayerSparseWork& w = work[static_cast<std::size_t>(l)];
      const Offs& o = offs[static_cast<std::size_t>(l)];
      sparse::PrefillParams& p = w.pre;
      p.seqs = reinterpret_cast<const sparse::PrefillSeq*>(base + o.pre_seqs);
      p.q_heads = mc.num_attention_heads;
      p.kv_heads = kvh;
      p.head_dim = mc.head_dim;
      p.scale = 1.0f / std::sqrt(static_cast<float>(mc.head_dim));
      p.q = qkv.get();
      p.q_stride = qkv_dim;
      p.lse = pre_lse.get();
      p.src_pool = kv_pool.get();
      p.scratch_pool = kv_pool.get();  // unused: scratch pages are pool pages (src_scratch 0)
      p.src_pages = i32(o.src);
      p.dst_pool = kv_pool.get();
      p.dst_pages = i32(o.dst);
      p.dst_scores = score_pool.get();
      p.page_elems = binfo.layout.page_elems();
      p.raw = f32(raw_off);
      p.pooled = f32(pooled_off);
      p.kept_idx = i32(kidx_off);
      p.kept_score = f32(kscore_off);
      sparse::ShrinkParams& q = w.shr;
      q.seqs = reinterpret_cast<const sparse::ShrinkSeq*>(base + o.shr_seqs);
      q.kv_heads = kvh;
      q.head_dim = mc.head_dim;
      q.pool = kv_pool.get();
      q.scores = score_pool.get();
      q.pages = i32(o.shr_pages);
      q.page_elems = binfo.layout.page_elems();
      q.stage_idx = i32(sidx_off);
      q.stage_kv = reinterpret_cast<bf16*>(base + skv_off);
      q.stage_score = f32(sscore_off);
    }
    if (!meta.empty())
      CUDA_CHECK(cudaMemcpyAsync(base, sp_meta.get(), meta.size(), cudaMemcpyHostToDevice, stream));
  }
  CUDA_CHECK(cudaEventRecord(ev0, stream));
  upload(d_tokens, h_tokens, T_run);
  upload(d_pos, h_pos, T_run);
  upload(d_seq_of, h_seq_of, T_run);
  upload(d_q_row, h_q_row, S_run);
  // Per-layer decode metadata: L rows of S_run entries, row pitch max_seqs.
  auto upload_layers = [&](void* d, const void* h, std::size_t elem) {
    if (S_run > 0)
      CUDA_CHECK(cudaMemcpy2DAsync(d, elem * max_seqs, h, elem * max_seqs, elem * S_run,
                                   static_cast<std::size_t>(L), cudaMemcpyHostToDevice, stream));
  };
  upload_layers(d_seq_len.get(), h_seq_len.get(), sizeof(int));
  upload_layers(d_slots.get(), h_slots.get(), sizeof(int));
  upload_layers(d_dec_seqs.get(), h_dec_seqs.get(), sizeof(sparse::DecodeSeq));
  upload(d_lm_rows, h_lm_rows, lm_run);
  upload(d_row_start, h_row_start, S);
  upload(d_nq, h_nq, S);
  upload(d_qpos0, h_qpos0, S);
  upload(d_tile_seq, h_tile_seq, num_tiles);
  upload(d_tile_q0, h_tile_q0, num_tiles);
  CUDA_CHECK(cudaMemcpy2DAsync(d_tables.get(), static_cast<std::size_t>(pmax) * sizeof(int),
                               h_tables.get(), static_cast<std::size_t>(max_pages) * sizeof(int),
                               max_pages * sizeof(int), static_cast<std::size_t>(S) * L,
                               cudaMemcpyHostToDevice, stream));

  // Sparse decode graphs are keyed by a power-of-two bound on the attended slots (the
  // update kernel's grid); full-cache graphs by 0. Decode attention splits: eager steps
  // take them from the batch and the longest sequence; full-cache graphs from the bucket and
  // max_model_len (one graph per bucket); sparse decode graphs use the eager count (part of
  // the key), so that replay does the same arithmetic as eager (issue 9: a different split
  // count reorders the softmax sums; suspected of the graph/eager disagreement).
  const int eager_splits =
      forced_splits > 0 ? forced_splits : pick_splits(std::max(S_dec, 1), max_len);
  int slot_bucket = 0;
  if (sparse_decode) {
    slot_bucket = 64;
    while (slot_bucket < dec_max_slots) slot_bucket *= 2;
  }
  if (bucket > 0) {
    const int splits =
        sparse_decode || forced_splits > 0 ? eager_splits : pick_splits(bucket, pmax * kBlockSize);
    const std::tuple<int, int, int, bool> key{bucket, slot_bucket, splits, taps};
    auto it = graphs.find(key);
    if (it == graphs.end()) {
      cudaGraph_t g = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      try {
        forward(bucket, bucket, 0, splits, bucket, true, nullptr, sparse_decode, slot_bucket);
      } catch (...) {
        cudaStreamEndCapture(stream, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      CUDA_CHECK(cudaStreamEndCapture(stream, &g));
      cudaGraphExec_t exec = nullptr;
      CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
      CUDA_CHECK(cudaGraphDestroy(g));
      it = graphs.emplace(key, exec).first;
    }
    CUDA_CHECK(cudaGraphLaunch(it->second, stream));
  } else {
    forward(T, S_dec, num_tiles, eager_splits, n_lm, true, work.empty() ? nullptr : &work,
            sparse_decode, dec_max_slots);
  }
  tap_rows = bucket > 0 ? bucket : T;
  tap_dec_rows = bucket > 0 ? bucket : S_dec;
  tap_has_lse = sparse_decode && tap_dec_rows > 0;

  // Logits and sampling. Row r of the logits buffer is lm row r of the current chunk.

  std::vector<std::pair<int, int>> lm_slot(static_cast<std::size_t>(S),
                                           {-1, -1});  // (first lm row, count)
  {
    int k = 0;
    for (int i = 0; i < S; ++i) {
      const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
      const int n = static_cast<int>(s.tokens.size());
      if (bucket > 0) {
        if (s.sample || s.return_logits)
          lm_slot[static_cast<std::size_t>(i)] = {first_row[static_cast<std::size_t>(i)], 1};
      } else if (s.return_logits) {
        lm_slot[static_cast<std::size_t>(i)] = {k, n}, k += n;
      } else if (s.sample) {
        lm_slot[static_cast<std::size_t>(i)] = {k, 1}, k += 1;
      }
    }
  }
  const std::vector<std::int32_t> empty;
  // Chunks of logit_rows lm rows: the first was computed by forward(); later ones re-run the
  // final norm + lm_head on the (still valid) residual stream.
  for (int base = 0; base < lm_run; base += logit_rows) {
    const int n = std::min(logit_rows, lm_run - base);
    if (base > 0) {
      const int H = mc.hidden_size;
      // forward() added the last layer's MLP output to the first chunk's rows only; each row
      // is in exactly one chunk, so these rows get it here.
      launch_rmsnorm({resid.get(), delta.get(), final_norm, lm_normed.get(), d_lm_rows.get() + base,
                      n, H, static_cast<float>(mc.rms_norm_eps)},
                     stream);
      lm_logits(n);
      launch_argmax({logits.get(), d_argmax.get(), n, V}, stream);
    }
    CUDA_CHECK(cudaMemcpyAsync(h_argmax.get(), d_argmax.get(), n * sizeof(int),
                               cudaMemcpyDeviceToHost, stream));
    // Which rows of this chunk go to the host in full (return_logits; sampling the device
    // sampler does not cover), which are sampled on the device (cuda/sampling.h)?
    std::vector<int> need_rows;
    std::vector<SampleRequest> dev_reqs;
    std::vector<int> dev_index(static_cast<std::size_t>(S), -1);
    for (int i = 0; i < S; ++i) {
      const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
      const auto [r0, cnt] = lm_slot[static_cast<std::size_t>(i)];
      if (r0 < 0) continue;
      const int last = r0 + cnt - 1;
      const bool sampled_here = s.sample && last >= base && last < base + n;
      const bool on_device =
          sampled_here && s.params && !device_greedy(s) && device_sampling_supported(*s.params, V);
      if (on_device) {
        SampleRequest q;
        q.logit_row = last - base;
        q.params = s.params;
        q.prompt = s.prompt;
        q.output = s.output;
        q.eos_ids = s.params->ignore_eos ? nullptr : &mc.eos_token_ids;
        dev_index[static_cast<std::size_t>(i)] = static_cast<int>(dev_reqs.size());
        dev_reqs.push_back(q);
      }
      const bool host_row = s.return_logits || (s.sample && !device_greedy(s) && !on_device);
      if (!host_row) continue;
      for (int r = std::max(r0, base); r <= std::min(last, base + n - 1); ++r)
        need_rows.push_back(r - base);
    }
    // Validation before anything is queued (InvalidRequest names the parameter).
    const SampleBatch dev_batch = prepare_samples(dev_reqs, V);
    for (int r : need_rows)
      CUDA_CHECK(cudaMemcpyAsync(h_logits.get() + static_cast<std::size_t>(r) * V,
                                 logits.get() + static_cast<std::size_t>(r) * V, V * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream));
    // After the copies (stream order): the sampler edits its rows in place.
    sampler.run(logits.get(), V, dev_batch, stream);
    if (base + n >= lm_run) CUDA_CHECK(cudaEventRecord(ev1, stream));
    // tp > 1: bounded wait, so a rank that died mid-step fails this one instead of hanging.
    if (tp.comm) tp.comm->wait(stream, std::chrono::seconds(120));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < S; ++i) {
      const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
      SeqResult& out = result.seqs[static_cast<std::size_t>(i)];
      out.seq_id = s.seq_id;
      const auto [r0, cnt] = lm_slot[static_cast<std::size_t>(i)];
      if (r0 < 0) continue;
      const int last = r0 + cnt - 1;
      if (s.return_logits) {
        out.logits.resize(static_cast<std::size_t>(s.tokens.size()) * V);
        for (int r = std::max(r0, base); r <= std::min(last, base + n - 1); ++r) {
          const int t = bucket > 0 ? 0 : r - r0;
          std::memcpy(out.logits.data() + static_cast<std::size_t>(t) * V,
                      h_logits.get() + static_cast<std::size_t>(r - base) * V, V * sizeof(float));
        }
      }
      if (s.sample && last >= base && last < base + n) {
        if (!s.params) throw InternalError("CUDA backend: sample without SamplingParams");
        if (device_greedy(s)) {
          out.token = h_argmax[last - base];
        } else if (const int j = dev_index[static_cast<std::size_t>(i)]; j >= 0) {
          SampleOutput so =
              finish_sample(sampler.results()[j], dev_batch.rows[static_cast<std::size_t>(j)]);
          out.token = so.token;
          out.logprob = so.logprob;
          out.top = std::move(so.top);
        } else {
          std::vector<float> row_copy(
              h_logits.get() + static_cast<std::size_t>(last - base) * V,
              h_logits.get() + static_cast<std::size_t>(last - base + 1) * V);
          const SamplingParams& p = *s.params;
          const SampleOutput so =
              sample_row(std::span<float>(row_copy), p, s.prompt ? *s.prompt : empty,
                         s.output ? *s.output : empty, p.ignore_eos ? empty : mc.eos_token_ids);
          out.token = so.token;
          out.logprob = so.logprob;
          out.top = so.top;
        }
      }
    }
  }
  if (lm_run == 0) {
    CUDA_CHECK(cudaEventRecord(ev1, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  for (int i = 0; i < S; ++i)
    result.seqs[static_cast<std::size_t>(i)].seq_id = plan.seqs[static_cast<std::size_t>(i)].seq_id;
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
  const double wall =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
  result.stats.device_ms = ms;
  result.stats.host_ms = std::max(0.0, wall - ms);
  result.stats.tokens = T;
  return result;
}

CudaBackend::CudaBackend(const Config& config, int device, CudaTpRank tp)
    : impl_(std::make_unique<CudaBackendImpl>(config, device, tp)) {}
CudaBackend::~CudaBackend() = default;
const BackendInfo& CudaBackend::info() const {
  return impl_->binfo;
}
const ModelConfig& CudaBackend::model() const {
  return impl_->full_mc;  // the whole model (impl_->mc holds this rank's local counts)
}
StepResult CudaBackend::step(const StepPlan& plan) {
  return impl_->step(plan);
}

std::vector<float> CudaBackend::weight_to_host(const std::string& name) const {
  auto it = impl_->by_name.find(name);
  if (it == impl_->by_name.end()) throw ModelError("CUDA backend: no weight named " + name);
  CUDA_CHECK(cudaSetDevice(impl_->device));
  std::vector<std::uint16_t> raw(it->second.second);
  CUDA_CHECK(cudaMemcpy(raw.data(), it->second.first, raw.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) out[i] = bf16_to_float(raw[i]);
  return out;
}
void CudaBackend::set_cuda_graphs(bool on) {
  impl_->use_graphs = on;
}
void CudaBackend::set_sparse_graphs(bool on) {
  impl_->sparse_graphs = on;
}
void CudaBackend::set_decode_splits(int n) {
  if (n < 0 || n > kMaxDecodeSplits)
    throw InternalError("set_decode_splits: " + std::to_string(n) + " outside 0.." +
                        std::to_string(kMaxDecodeSplits));
  impl_->forced_splits = n;
}
void CudaBackend::set_layer_taps(bool on) {
  CudaBackendImpl& b = *impl_;
  CUDA_CHECK(cudaSetDevice(b.device));
  if (on && b.tap_qkv.size() == 0) {
    const std::size_t L = static_cast<std::size_t>(b.mc.num_hidden_layers);
    b.tap_qkv = DeviceArray<bf16>(L * b.max_tokens * b.qkv_dim);
    b.tap_attn = DeviceArray<bf16>(L * b.max_tokens * b.q_dim);
    b.tap_lse = DeviceArray<float>(L * b.max_seqs * b.mc.num_attention_heads);
  }
  b.taps = on;
}
std::vector<CudaBackend::LayerTap> CudaBackend::layer_taps() const {
  const CudaBackendImpl& b = *impl_;
  if (!b.taps) throw InternalError("layer_taps: taps are off (set_layer_taps(true) first)");
  CUDA_CHECK(cudaSetDevice(b.device));
  std::vector<LayerTap> out(static_cast<std::size_t>(b.mc.num_hidden_layers));
  for (std::size_t l = 0; l < out.size(); ++l) {
    LayerTap& t = out[l];
    t.rows = b.tap_rows;
    const std::size_t lt = l * b.max_tokens;
    t.qkv.resize(static_cast<std::size_t>(b.tap_rows) * b.qkv_dim);
    t.attn.resize(static_cast<std::size_t>(b.tap_rows) * b.q_dim);
    CUDA_CHECK(cudaMemcpy(t.qkv.data(), b.tap_qkv.get() + lt * b.qkv_dim, t.qkv.size() * 2,
                          cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(t.attn.data(), b.tap_attn.get() + lt * b.q_dim, t.attn.size() * 2,
                          cudaMemcpyDeviceToHost));
    if (b.tap_has_lse) {
      t.dec_lse.resize(static_cast<std::size_t>(b.tap_dec_rows) * b.mc.num_attention_heads);
      CUDA_CHECK(cudaMemcpy(t.dec_lse.data(),
                            b.tap_lse.get() + l * b.max_seqs * b.mc.num_attention_heads,
                            t.dec_lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
    }
  }
  return out;
}
std::vector<std::uint16_t> CudaBackend::read_kv_pages(const std::vector<int>& pages) const {
  const CudaBackendImpl& b = *impl_;
  CUDA_CHECK(cudaSetDevice(b.device));
  const std::size_t pe = b.binfo.layout.page_elems();
  std::vector<std::uint16_t> out(pages.size() * pe);
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] < 0 || pages[i] >= b.binfo.num_pages + b.scratch_pages)
      throw InternalError("read_kv_pages: page " + std::to_string(pages[i]) + " outside the pool");
    CUDA_CHECK(cudaMemcpy(out.data() + i * pe, b.kv_pool.get() + pages[i] * pe, pe * 2,
                          cudaMemcpyDeviceToHost));
  }
  return out;
}
std::vector<float> CudaBackend::read_score_pages(const std::vector<int>& pages) const {
  const CudaBackendImpl& b = *impl_;
  CUDA_CHECK(cudaSetDevice(b.device));
  const std::size_t se = b.binfo.layout.score_elems();
  std::vector<float> out(pages.size() * se);
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] < 0 || pages[i] >= b.binfo.num_pages + b.scratch_pages)
      throw InternalError("read_score_pages: page " + std::to_string(pages[i]) +
                          " outside the pool");
    CUDA_CHECK(cudaMemcpy(out.data() + i * se, b.score_pool.get() + pages[i] * se,
                          se * sizeof(float), cudaMemcpyDeviceToHost));
  }
  return out;
}
int CudaBackend::graphs_captured() const {
  return static_cast<int>(impl_->graphs.size());
}
std::size_t CudaBackend::activation_bytes() const {
  return impl_->activation_bytes;
}
std::size_t CudaBackend::kv_pool_bytes() const {
  return impl_->kv_bytes;
}

std::vector<std::unique_ptr<Backend>> make_cuda_backends(const Config& config) {
  if (config.backend.tp_size != 1) return tp::make_cuda_tp_backends(config);
  const int dev = config.backend.devices.empty() ? 0 : config.backend.devices.front();
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(std::make_unique<CudaBackend>(config, dev));
  return out;
}

}  // namespace strata::cuda
