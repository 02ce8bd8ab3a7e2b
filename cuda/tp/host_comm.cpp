#include "cuda/tp/host_comm.h"

#include <vector>

#include "cuda/cuda_check.h"
#include "runtime/model/safetensors.h"

namespace strata::cuda::tp {

void HostComm::all_reduce_bf16(void* data, std::size_t count, cudaStream_t stream) {
  std::vector<std::uint16_t> h(count);
  CUDA_CHECK(cudaMemcpyAsync(h.data(), data, count * 2, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> f(count);
  for (std::size_t i = 0; i < count; ++i) f[i] = bf16_to_float(h[i]);
  group_->all_reduce_sum(rank_, f.data(), count);
  for (std::size_t i = 0; i < count; ++i) h[i] = float_to_bf16(f[i]);
  CUDA_CHECK(cudaMemcpyAsync(data, h.data(), count * 2, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // `h` dies here
}

void HostComm::all_gather_f32(const float* send, float* recv, std::size_t count,
                              cudaStream_t stream) {
  std::vector<float> mine(count), all;
  CUDA_CHECK(cudaMemcpyAsync(mine.data(), send, count * 4, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  group_->all_gather(rank_, mine.data(), count, all);
  CUDA_CHECK(cudaMemcpyAsync(recv, all.data(), all.size() * 4, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void HostComm::wait(cudaStream_t stream, std::chrono::milliseconds) {
  CUDA_CHECK(cudaStreamSynchronize(stream));  // the collectives already met on the host
}

}  // namespace strata::cuda::tp
