// The page tables of a step on the device (docs/cuda-backend.md "Page tables on the device"):
// whole tables in plan order (backend.device_tables: false), or the resident store d_tables
// changed by the step's delta ops (cuda/table_store.h), uploaded and applied round by round by
// one small kernel (cuda/table_ops.h) before the layers run. Either way the kernels and the
// CUDA graphs read d_tables at its fixed address.
#include <cuda_runtime.h>

#include "cuda/backend/backend_impl.h"
#include "cuda/table_ops.h"

namespace strata::cuda {

void CudaBackendImpl::allocate_device_tables() {
  device_tables = cfg.backend.device_tables;
  const int L = mc.num_hidden_layers;
  d_table_ops = DeviceArray<TableOp>(TableStore::max_ops(max_seqs, L));
  d_table_data =
      DeviceArray<int>(static_cast<std::size_t>(TableStore::delta_entries(max_seqs, L, pmax)));
}

void CudaBackendImpl::upload_tables() {
  const StepLayout& s = layout;
  if (!s.table_deltas) {
    const int L = mc.num_hidden_layers, max_pages = s.table_pages;
    CUDA_CHECK(cudaMemcpy2DAsync(d_tables.get(), static_cast<std::size_t>(pmax) * sizeof(int),
                                 image.tables(), static_cast<std::size_t>(max_pages) * sizeof(int),
                                 max_pages * sizeof(int), static_cast<std::size_t>(s.num_seqs) * L,
                                 cudaMemcpyHostToDevice, stream));
    return;
  }
  // Rounds reuse the device buffers: the stream orders each copy after the previous kernel.
  for (const TableRound& r : s.table_rounds) {
    if (r.num_ops == 0) continue;
    CUDA_CHECK(cudaMemcpyAsync(d_table_ops.get(), image.table_ops() + r.first_op,
                               static_cast<std::size_t>(r.num_ops) * sizeof(TableOp),
                               cudaMemcpyHostToDevice, stream));
    if (r.num_data > 0)
      CUDA_CHECK(cudaMemcpyAsync(d_table_data.get(), image.tables() + r.first_data,
                                 static_cast<std::size_t>(r.num_data) * sizeof(int),
                                 cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(launch_table_ops({.store = d_tables.get(),
                                 .ops = d_table_ops.get(),
                                 .num_ops = r.num_ops,
                                 .data = d_table_data.get(),
                                 .data_base = r.first_data},
                                stream));
  }
}

}  // namespace strata::cuda
