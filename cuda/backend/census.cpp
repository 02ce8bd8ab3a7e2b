// The census of kept positions on the CUDA backend (SeqStep::report_kept, SeqResult::kept):
// the same meaning as the CPU backend's (runtime/cpu/attention.h kept_positions). Full layers
// hold slot p = position p and are counted on the host without a read; sparse layers' slots are
// read from the position pool (pos_pool, written by the sparse kernels beside the scores). A
// step that asks for no census does nothing here: no copy, no sync.
//
// Three parts, so that a pipelined step (pipeline.cpp) queues the gather and its copy with the
// step and counts at collect, while step() does all three at once: plan_census (host: the layers'
// states after the step, the distinct pages to read), queue_census (on the stream, after the
// step's work: upload the page list, gather, copy to a host buffer), count_census (host, once
// the copy completed).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "cuda/backend/backend_impl.h"
#include "runtime/kept_positions.h"
#include "runtime/step_plan_check.h"

namespace strata::cuda {

bool CudaBackendImpl::plan_census(const StepPlan& plan, CensusWork& w) const {
  w.todo.clear();
  w.pages.clear();
  w.page_row.clear();
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const SeqStep& s = plan.seqs[i];
    if (!s.report_kept) continue;
    CensusWork::Row c;
    c.seq = i;
    c.tokens = s.start + static_cast<std::int32_t>(s.tokens.size());
    c.after = s.layers;
    for (LayerSlots& ls : c.after) {
      advance_layer(ls, layer_step(s, ls));
      if (!ls.rule.sparse()) continue;
      const int need = pages_for_slots(ls.valid);
      STRATA_CHECK(static_cast<int>(ls.pages.size()) >= need,
                   "census: sequence " + std::to_string(s.seq_id) + " holds " +
                       std::to_string(ls.valid) + " slots in " + std::to_string(ls.pages.size()) +
                       " pages");
      for (int k = 0; k < need; ++k) {
        const std::int32_t page = ls.pages[static_cast<std::size_t>(k)];
        if (w.page_row.emplace(page, static_cast<int>(w.pages.size())).second)
          w.pages.push_back(page);
      }
    }
    w.todo.push_back(std::move(c));
  }
  return !w.todo.empty();
}

void CudaBackendImpl::queue_census(const CensusWork& w, PinnedArray<std::int32_t>& src,
                                   PinnedArray<std::int32_t>& dst) {
  if (w.pages.empty()) return;
  const std::size_t per_page =
      static_cast<std::size_t>(mc.num_key_value_heads) * static_cast<std::size_t>(kBlockSize);
  const std::size_t n = w.pages.size();
  if (census_pages.size() < n) {
    // Grow-only; earlier steps' gathers may still read the old buffers: let them finish first
    // (cudaFree would wait for the device anyway). Once or twice per server.
    CUDA_CHECK(cudaStreamSynchronize(stream));
    census_pages = DeviceArray<std::int32_t>(n * 2);
    census_out = DeviceArray<std::int32_t>(n * 2 * per_page);
  }
  // The host buffers are the caller's (a pipelined slot's: not read or written by a step in
  // flight); the copies read and write them in stream order.
  if (src.size() < n) src = PinnedArray<std::int32_t>(n * 2);
  if (dst.size() < n * per_page) dst = PinnedArray<std::int32_t>(n * 2 * per_page);
  std::memcpy(src.get(), w.pages.data(), n * sizeof(std::int32_t));
  CUDA_CHECK(cudaMemcpyAsync(census_pages.get(), src.get(), n * sizeof(std::int32_t),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(sparse::launch_gather_positions(pos_pool.get(), census_pages.get(),
                                             static_cast<int>(n), static_cast<int>(per_page),
                                             census_out.get(), stream));
  CUDA_CHECK(cudaMemcpyAsync(dst.get(), census_out.get(), n * per_page * sizeof(std::int32_t),
                             cudaMemcpyDeviceToHost, stream));
}

void CudaBackendImpl::count_census(const CensusWork& w, const std::int32_t* host,
                                   StepResult& result) const {
  const int heads = mc.num_key_value_heads;
  const std::size_t per_page = static_cast<std::size_t>(heads) * kBlockSize;
  for (const CensusWork::Row& c : w.todo) {
    std::vector<KeptPositions>& kept = result.seqs[c.seq].kept;
    kept.resize(c.after.size());
    for (std::size_t l = 0; l < c.after.size(); ++l) {
      const LayerSlots& ls = c.after[l];
      KeptCounter count(ls.rule, c.tokens);
      if (!ls.rule.sparse()) {
        count.add_full(ls.valid, heads);
      } else {
        // One lookup per page (not per slot): a census of many rows counts millions of slots.
        for (int k = 0; k < pages_for_slots(ls.valid); ++k) {
          const std::size_t row =
              static_cast<std::size_t>(w.page_row.at(ls.pages[static_cast<std::size_t>(k)]));
          const int n = std::min(kBlockSize, ls.valid - k * kBlockSize);
          for (int h = 0; h < heads; ++h) {
            const std::int32_t* slot =
                host + row * per_page + static_cast<std::size_t>(h) * kBlockSize;
            for (int j = 0; j < n; ++j) count.add(slot[j]);
          }
        }
      }
      kept[l] = count.result();
    }
  }
}

void CudaBackendImpl::collect_kept(const StepPlan& plan, StepResult& result) {
  if (!plan_census(plan, census_sync)) return;
  queue_census(census_sync, census_src_sync, census_host_sync);
  if (!census_sync.pages.empty()) CUDA_CHECK(cudaStreamSynchronize(stream));
  count_census(census_sync, census_host_sync.get(), result);
}

}  // namespace strata::cuda
