// CUDA backend: weights, KV pool, the per-step forward pass and CUDA graphs (see the header).
#include "cuda/cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <span>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "cuda/attention.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/dispatch.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "runtime/error.h"
#include "runtime/make_model.h"
#include "runtime/model_loader.h"
#include "runtime/sampler.h"

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

  // KV pool.
  DeviceArray<bf16> kv_pool;
  std::size_t kv_bytes = 0;

  // Graphs: bucket size -> executable graph.
  bool use_graphs = true;
  std::vector<int> buckets;
  std::map<int, cudaGraphExec_t> graphs;
  std::map<int, int> graph_splits;
  cudaEvent_t ev0 = nullptr, ev1 = nullptr;

  CudaBackendImpl(const Config& c, int dev);
  ~CudaBackendImpl();

  bf16* alloc_weight(std::size_t n) {
    owned.emplace_back(n);
    return owned.back().get();
  }
  void build_weights();
  void random_tensor(bf16* dst, const std::string& name, std::size_t n, float scale, float offset);
  void allocate_workspace();
  void plan_kv_pool();

  // Forward over the metadata already in the device buffers.
  void forward(int T, int S_dec, int num_tiles, int num_splits, int n_lm_rows, bool argmax_all);
  StepResult step(const StepPlan& plan);
  int pick_splits(int batch, int max_len) const {
    const int by_sms = (4 * kNumSms + batch * mc.num_key_value_heads - 1) /
                       std::max(1, batch * mc.num_key_value_heads);
    const int by_len = std::max(1, (max_len + 255) / 256);
    return std::clamp(std::min(by_sms, by_len), 1, kMaxDecodeSplits);
  }
};

CudaBackendImpl::CudaBackendImpl(const Config& c, int dev) : cfg(c), device(dev) {
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
  plan_kv_pool();
  use_graphs = cfg.backend.cuda_graphs;
  if (!cfg.backend.graph_batch_sizes.empty()) {
    buckets = cfg.backend.graph_batch_sizes;
  } else {
    buckets.assign(std::begin(kGraphBucketsDefault), std::end(kGraphBucketsDefault));
  }
  std::erase_if(buckets, [&](int b) { return b <= 0 || b > max_seqs; });
  std::sort(buckets.begin(), buckets.end());
  binfo.name = "cuda";
  binfo.layout = KvLayout{mc.num_key_value_heads, mc.head_dim, 2};
  binfo.tp_size = 1;
}

CudaBackendImpl::~CudaBackendImpl() {
  cudaSetDevice(device);
  for (auto& [b, g] : graphs) cudaGraphExecDestroy(g);
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
  auto tensor = [&](bf16* dst, const std::string& name, std::size_t n, float scale, float offset) {
    if (random)
      random_tensor(dst, name, n, scale, offset);
    else
      upload(dst, name, n);
  };
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
           1.0f / std::sqrt(static_cast<float>(q_dim)), 0.0f);
    tensor(d.post_norm, p + "post_attention_layernorm.weight", h, 0.1f, 1.0f);
    tensor(d.gate_up, p + "mlp.gate_proj.weight", in * h, lin, 0.0f);
    tensor(d.gate_up + in * h, p + "mlp.up_proj.weight", in * h, lin, 0.0f);
    tensor(d.down, p + "mlp.down_proj.weight", h * in, 1.0f / std::sqrt(static_cast<float>(in)),
           0.0f);
    layers.push_back(d);
  }
  final_norm = alloc_weight(h);
  tensor(final_norm, "model.norm.weight", h, 0.1f, 1.0f);
  if (mc.tie_word_embeddings) {
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
  both(d_seq_len, h_seq_len, max_seqs);
  both(d_lm_rows, h_lm_rows, T);
  both(d_argmax, h_argmax, logit_rows);
  h_logits = PinnedArray<float>(static_cast<std::size_t>(logit_rows) * V);
  CUDA_CHECK(cudaMemsetAsync(d_tables.get(), 0, d_tables.bytes(), stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::size_t after_free = 0;
  CUDA_CHECK(cudaMemGetInfo(&after_free, &total));
  activation_bytes = before_free > after_free ? before_free - after_free : 0;
}

void CudaBackendImpl::plan_kv_pool() {
  const KvLayout layout{mc.num_key_value_heads, mc.head_dim, 2};
  std::size_t free_b = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  const std::size_t headroom = 256ull << 20;  // graphs, cuBLAS internals, driver
  std::size_t budget =
      free_b > headroom ? static_cast<std::size_t>((free_b - headroom) * cfg.cache.kv_fraction) : 0;
  if (cfg.cache.kv_bytes > 0) budget = std::min<std::size_t>(budget, cfg.cache.kv_bytes);
  const std::size_t pages = budget / layout.page_bytes();
  if (pages < static_cast<std::size_t>(mc.num_hidden_layers))
    throw ConfigError("cache.kv_bytes",
                      "KV pool of " + std::to_string(budget) + " bytes holds " +
                          std::to_string(pages) + " pages of " +
                          std::to_string(layout.page_bytes()) +
                          " bytes: fewer than one per layer (free device memory " +
                          std::to_string(free_b) + " bytes)");
  const std::size_t n_pages = std::min<std::size_t>(pages, 0x7fffffff);
  kv_pool = DeviceArray<bf16>(n_pages * layout.page_elems());
  kv_bytes = kv_pool.bytes();
  binfo.num_pages = static_cast<int>(n_pages);
}

void CudaBackendImpl::forward(int T, int S_dec, int num_tiles, int num_splits, int n_lm_rows,
                              bool argmax_all) {
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
    launch_rope_kv_write(
        {qkv.get(), d_pos.get(), d_seq_of.get(), table, table_stride, inv_freq.get(), kv_pool.get(),
         page_elems, T, mc.num_attention_heads, mc.num_key_value_heads, mc.head_dim},
        stream);
    // Attention of layer l: full-cache layers. The sparse policies (LayerRule::sparse())
    // plug in here with the cuda/sparse/ kernels; step() rejects them before we get here.
    if (S_dec > 0)
      launch_decode_attention({qkv.get(),
                               qkv_dim,
                               d_q_row.get(),
                               kv_pool.get(),
                               page_elems,
                               table,
                               table_stride,
                               d_seq_len.get(),
                               S_dec,
                               num_splits,
                               part_o.get(),
                               part_ml.get(),
                               attn.get(),
                               q_dim,
                               nullptr,
                               nullptr,
                               0,
                               mc.num_attention_heads,
                               mc.num_key_value_heads,
                               mc.head_dim,
                               scale},
                              stream);
    if (num_tiles > 0)
      launch_prefill_attention(
          {qkv.get(), qkv_dim, kv_pool.get(), page_elems, table, table_stride, d_row_start.get(),
           d_nq.get(), d_qpos0.get(), d_tile_seq.get(), d_tile_q0.get(), num_tiles, attn.get(),
           q_dim, nullptr, mc.num_attention_heads, mc.num_key_value_heads, mc.head_dim, scale},
          stream);
    gemm->linear(attn.get(), w.o, delta.get(), T, H, q_dim);
    launch_rmsnorm({resid.get(), delta.get(), w.post_norm, normed.get(), nullptr, T, H, eps},
                   stream);
    gemm->linear(normed.get(), w.gate_up, gu.get(), T, 2 * I, H);
    launch_swiglu({gu.get(), act.get(), T, I}, stream);
    gemm->linear(act.get(), w.down, delta.get(), T, H, I);
  }
  // Final norm only for the rows whose logits are needed (first chunk; step() loops more).
  const int n = std::min(n_lm_rows, logit_rows);
  launch_rmsnorm(
      {resid.get(), delta.get(), final_norm, lm_normed.get(), d_lm_rows.get(), n, H, eps}, stream);
  gemm->linear_f32out(lm_normed.get(), lm_head, logits.get(), n, V, H);
  if (argmax_all) launch_argmax({logits.get(), d_argmax.get(), n, V}, stream);
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

  // Validate and order: single-token sequences (decode kernel) first, then prefill chunks.
  std::vector<int> order;
  int T = 0, max_pages = 1;
  std::unordered_set<int> written_pages;
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < S; ++i)
      if ((plan.seqs[static_cast<std::size_t>(i)].tokens.size() == 1) == (pass == 0))
        order.push_back(i);
  for (int i = 0; i < S; ++i) {
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    const int n = static_cast<int>(s.tokens.size());
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
      if (ls.rule.sparse())
        throw ConfigError("sparsity", std::string("CUDA sparsity: not yet integrated (layer ") +
                                          std::to_string(l) + " has policy " +
                                          to_string(ls.rule.policy) + ")");
      if (static_cast<int>(ls.pages.size()) < need)
        throw InternalError("CUDA backend: sequence " + std::to_string(s.seq_id) + " layer " +
                            std::to_string(l) + " page table has " +
                            std::to_string(ls.pages.size()) + " pages, needs " +
                            std::to_string(need));
      for (int pg : ls.pages)
        if (pg < 0 || pg >= binfo.num_pages)
          throw InternalError("CUDA backend: page id " + std::to_string(pg) +
                              " outside the pool (" + std::to_string(binfo.num_pages) + " pages)");
      for (int pi = s.start / kBlockSize; pi < need; ++pi)
        if (!written_pages.insert(ls.pages[static_cast<std::size_t>(pi)]).second)
          throw InternalError("CUDA backend: page " +
                              std::to_string(ls.pages[static_cast<std::size_t>(pi)]) +
                              " written twice in one step");
    }
    max_pages = std::max(max_pages, need);
    T += n;
  }
  if (T > max_tokens)
    throw InternalError("CUDA backend: step has " + std::to_string(T) +
                        " tokens, max_num_batched_tokens is " + std::to_string(max_tokens));

  // Metadata into pinned staging.
  int S_dec = 0, num_tiles = 0, max_len = 0, row = 0;
  std::vector<int> first_row(static_cast<std::size_t>(S));
  for (int k = 0; k < S; ++k) {
    const int i = order[static_cast<std::size_t>(k)];
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    const int n = static_cast<int>(s.tokens.size());
    first_row[static_cast<std::size_t>(i)] = row;
    for (int t = 0; t < n; ++t) {
      h_tokens[row + t] = s.tokens[static_cast<std::size_t>(t)];
      h_pos[row + t] = s.start + t;
      h_seq_of[row + t] = k;
    }
    for (int l = 0; l < L; ++l) {
      const auto& pages = s.layers[static_cast<std::size_t>(l)].pages;
      const int cnt = std::min<int>(static_cast<int>(pages.size()), max_pages);
      std::memcpy(&h_tables[(static_cast<std::size_t>(k) * L + l) * max_pages], pages.data(),
                  cnt * sizeof(int));
    }
    if (n == 1) {
      h_q_row[S_dec] = row;
      h_seq_len[S_dec] = s.start + 1;
      max_len = std::max(max_len, s.start + 1);
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

  // Decode-only steps replay a CUDA graph of the smallest bucket that fits.
  const bool decode_only = num_tiles == 0 && n_lm <= S_dec;
  int bucket = 0;
  if (use_graphs && decode_only)
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
      h_tokens[b] = 0, h_pos[b] = 0, h_seq_of[b] = -1, h_q_row[b] = b, h_seq_len[b] = 0;
    }
    for (int b = 0; b < bucket; ++b) h_lm_rows[b] = b;  // all rows; map results below
    T_run = S_run = lm_run = bucket;
  }
  CUDA_CHECK(cudaEventRecord(ev0, stream));
  upload(d_tokens, h_tokens, T_run);
  upload(d_pos, h_pos, T_run);
  upload(d_seq_of, h_seq_of, T_run);
  upload(d_q_row, h_q_row, S_run);
  upload(d_seq_len, h_seq_len, S_run);
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

  if (bucket > 0) {
    auto it = graphs.find(bucket);
    if (it == graphs.end()) {
      const int splits = pick_splits(bucket, pmax * kBlockSize);
      cudaGraph_t g = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      try {
        forward(bucket, bucket, 0, splits, bucket, true);
      } catch (...) {
        cudaStreamEndCapture(stream, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      CUDA_CHECK(cudaStreamEndCapture(stream, &g));
      cudaGraphExec_t exec = nullptr;
      CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
      CUDA_CHECK(cudaGraphDestroy(g));
      it = graphs.emplace(bucket, exec).first;
      graph_splits[bucket] = splits;
    }
    CUDA_CHECK(cudaGraphLaunch(it->second, stream));
  } else {
    forward(T, S_dec, num_tiles, pick_splits(std::max(S_dec, 1), max_len), n_lm, true);
  }

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
      gemm->linear_f32out(lm_normed.get(), lm_head, logits.get(), n, V, H);
      launch_argmax({logits.get(), d_argmax.get(), n, V}, stream);
    }
    CUDA_CHECK(cudaMemcpyAsync(h_argmax.get(), d_argmax.get(), n * sizeof(int),
                               cudaMemcpyDeviceToHost, stream));
    // Which rows of this chunk go to the host in full?
    std::vector<int> need_rows;
    for (int i = 0; i < S; ++i) {
      const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
      const auto [r0, cnt] = lm_slot[static_cast<std::size_t>(i)];
      if (r0 < 0) continue;
      const bool host_row = s.return_logits || (s.sample && !device_greedy(s));
      if (!host_row) continue;
      const int last = r0 + cnt - 1;
      for (int r = std::max(r0, base); r <= std::min(last, base + n - 1); ++r)
        need_rows.push_back(r - base);
    }
    for (int r : need_rows)
      CUDA_CHECK(cudaMemcpyAsync(h_logits.get() + static_cast<std::size_t>(r) * V,
                                 logits.get() + static_cast<std::size_t>(r) * V, V * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream));
    if (base + n >= lm_run) CUDA_CHECK(cudaEventRecord(ev1, stream));
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

CudaBackend::CudaBackend(const Config& config, int device)
    : impl_(std::make_unique<CudaBackendImpl>(config, device)) {}
CudaBackend::~CudaBackend() = default;
const BackendInfo& CudaBackend::info() const {
  return impl_->binfo;
}
const ModelConfig& CudaBackend::model() const {
  return impl_->mc;
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
  if (config.backend.tp_size != 1)
    throw ConfigError("backend.tp_size", "the CUDA backend supports tp_size 1 so far (got " +
                                             std::to_string(config.backend.tp_size) + ")");
  const int dev = config.backend.devices.empty() ? 0 : config.backend.devices.front();
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(std::make_unique<CudaBackend>(config, dev));
  return out;
}

}  // namespace strata::cuda
