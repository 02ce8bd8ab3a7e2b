// The device half of the resident page tables (cuda/table_store.h): one launch applies one
// round of a step's table ops to the store before the layers run. Plain C++ header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/table_store.h"

namespace strata::cuda {

struct TableOpsParams {
  std::int32_t* store = nullptr;  // [rows][layers][pmax] the device page tables (d_tables)
  const TableOp* ops = nullptr;   // [num_ops] this round's ops
  int num_ops = 0;
  const std::int32_t* data = nullptr;  // [..] this round's page ids: TableOp::arg - data_base
  int data_base = 0;                   // TableRound::first_data
};

// Ops in any order (they write disjoint entries and copy only entries no op writes), one warp
// per op.
cudaError_t launch_table_ops(const TableOpsParams& p, cudaStream_t stream);

}  // namespace strata::cuda
