#include "cuda/tp/tp_backends.h"

#include <cstring>
#include <exception>
#include <thread>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/tp/nccl_comm.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"

namespace strata::cuda::tp {
namespace {

using bf16 = __nv_bfloat16;

bool ends_with(const std::string& s, const char* suffix) {
  const std::size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Extent of the split dimension of a split tensor in the whole model.
std::size_t split_extent(const ModelConfig& c, const std::string& name) {
  if (name == "lm_head.weight") return static_cast<std::size_t>(c.vocab_size);
  if (ends_with(name, ".q_proj.weight") || ends_with(name, ".o_proj.weight"))
    return static_cast<std::size_t>(c.q_dim());
  if (ends_with(name, ".k_proj.weight") || ends_with(name, ".v_proj.weight"))
    return static_cast<std::size_t>(c.kv_dim());
  return static_cast<std::size_t>(c.intermediate_size);  // gate/up rows, down columns
}

// A rank: its NCCL communicator outlives its backend.
class TpRankBackend final : public Backend {
 public:
  TpRankBackend(std::shared_ptr<NcclComm> comm, std::unique_ptr<CudaBackend> be)
      : comm_(std::move(comm)), be_(std::move(be)) {}
  const BackendInfo& info() const override { return be_->info(); }
  const ModelConfig& model() const override { return be_->model(); }
  StepResult step(const StepPlan& plan) override {
    // A failed group runs nothing more: a captured decode graph would replay NCCL kernels of
    // an aborted communicator. A requested abort is carried out here, on the rank's thread.
    if (comm_->aborted()) {
      comm_->abort();
      throw InternalError("tensor-parallel rank " + std::to_string(comm_->rank()) +
                          ": the group failed earlier (" + comm_->abort_reason() + ")");
    }
    try {
      return be_->step(plan);
    } catch (const InvalidRequest&) {
      throw;  // before the GPU work, or after every collective was enqueued: the group is fine
    } catch (...) {
      comm_->abort();  // collectives may be unmatched: fail the group rather than hang it
      throw;
    }
  }

 private:
  std::shared_ptr<NcclComm> comm_;  // declared first: destroyed after the backend
  std::unique_ptr<CudaBackend> be_;
};

}  // namespace

WeightFn sliced_weight_loader(WeightFn whole, SliceContext ctx) {
  return [whole = std::move(whole), ctx = std::move(ctx)](
             bf16* dst, const std::string& name, std::size_t n, float scale, float offset) {
    const TpSlice sl = tp_slice(ctx.full, ctx.shard, name);
    if (sl.split == TpSplit::kReplicated) return whole(dst, name, n, scale, offset);
    if (sl.count <= 0 || n % static_cast<std::size_t>(sl.count) != 0)
      throw InternalError("tensor-parallel slice of " + name + ": " + std::to_string(n) +
                          " elements for " + std::to_string(sl.count) + " rows/columns");
    const bool rows = sl.split == TpSplit::kRows;
    const std::size_t other = n / static_cast<std::size_t>(sl.count);  // the unsplit dimension
    const std::size_t extent = split_extent(ctx.full, name);
    if (!ctx.random) {
      const TensorView& t = ctx.weights->tensor(name);
      const std::vector<std::int64_t> want =
          rows ? std::vector<std::int64_t>{static_cast<std::int64_t>(extent),
                                           static_cast<std::int64_t>(other)}
               : std::vector<std::int64_t>{static_cast<std::int64_t>(other),
                                           static_cast<std::int64_t>(extent)};
      if (t.shape != want)
        throw ModelError(t.file + ": tensor " + name + " does not have the model's shape");
      std::vector<std::uint16_t> staging(n);
      if (t.dtype == DType::kBF16) {
        read_slice(t, sl, reinterpret_cast<std::byte*>(staging.data()));
      } else {
        const auto f = read_slice_f32(t, sl);
        for (std::size_t i = 0; i < n; ++i) staging[i] = float_to_bf16(f[i]);
      }
      CUDA_CHECK(cudaMemcpy(dst, staging.data(), n * 2, cudaMemcpyHostToDevice));
    } else {
      DeviceArray<bf16> all(extent * other);
      ctx.random_whole(all.get(), name, extent * other, scale, offset);
      if (rows)
        CUDA_CHECK(cudaMemcpyAsync(dst, all.get() + static_cast<std::size_t>(sl.begin) * other,
                                   n * 2, cudaMemcpyDeviceToDevice, ctx.stream));
      else
        CUDA_CHECK(cudaMemcpy2DAsync(
            dst, static_cast<std::size_t>(sl.count) * 2, all.get() + sl.begin, extent * 2,
            static_cast<std::size_t>(sl.count) * 2, other, cudaMemcpyDeviceToDevice, ctx.stream));
      CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // before `all` is freed
    }
    ctx.record(name, dst, n);
  };
}

void gather_vocab_logits(Collectives& comm, const ModelConfig& full, const float* local,
                         float* parts, float* logits, int rows, cudaStream_t stream) {
  const int size = comm.size();
  const TpShard me = make_tp_shard(full, comm.rank(), size);
  const std::size_t vs = static_cast<std::size_t>(me.vocab_slice), V = full.vocab_size;
  comm.all_gather_f32(local, parts, static_cast<std::size_t>(rows) * vs, stream);
  for (int r = 0; r < size; ++r) {
    const TpShard sr = make_tp_shard(full, r, size);
    if (sr.vocab == 0 || rows == 0) continue;
    CUDA_CHECK(cudaMemcpy2DAsync(
        logits + sr.vocab_begin, V * sizeof(float), parts + static_cast<std::size_t>(r) * rows * vs,
        vs * sizeof(float), static_cast<std::size_t>(sr.vocab) * sizeof(float),
        static_cast<std::size_t>(rows), cudaMemcpyDeviceToDevice, stream));
  }
}

NcclRank make_nccl_rank(const Config& config, const TpUniqueId& id, int rank, int size, int device,
                        std::chrono::milliseconds timeout, const std::function<bool()>& give_up) {
  auto comm = std::make_shared<NcclComm>(id, rank, size, device, timeout, give_up);
  std::unique_ptr<CudaBackend> be;
  try {
    be = std::make_unique<CudaBackend>(config, device, CudaTpRank{rank, size, comm.get()});
  } catch (...) {
    comm->abort();  // the peers may be waiting in a collective of their start-up
    throw;
  }
  NcclRank out;
  out.comm = comm;
  out.backend = std::make_unique<TpRankBackend>(std::move(comm), std::move(be));
  return out;
}

std::vector<std::unique_ptr<Backend>> make_cuda_tp_backends(const Config& config) {
  const int n = config.backend.tp_size;
  if (!have_nccl())
    throw ConfigError("backend.tp_size", "tensor parallelism needs NCCL; this build has none");
  int visible = 0;
  CUDA_CHECK(cudaGetDeviceCount(&visible));
  std::vector<int> devices = config.backend.devices;
  if (devices.empty())
    for (int r = 0; r < n; ++r) devices.push_back(r);
  if (static_cast<int>(devices.size()) != n)
    throw ConfigError("backend.devices", "must list tp_size (" + std::to_string(n) + ") devices");
  for (int d : devices)
    if (d < 0 || d >= visible)
      throw ConfigError("backend.devices", "CUDA device " + std::to_string(d) + " not present (" +
                                               std::to_string(visible) + " visible) for tp_size " +
                                               std::to_string(n));
  const TpUniqueId id = make_unique_id();
  std::vector<std::unique_ptr<Backend>> out(static_cast<std::size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      try {
        out[i] = make_nccl_rank(config, id, r, n, devices[i], std::chrono::seconds(120)).backend;
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace strata::cuda::tp
