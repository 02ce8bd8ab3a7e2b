// The census of kept positions on the CUDA backend (SeqStep::report_kept, SeqResult::kept):
// the same meaning as the CPU backend's (runtime/cpu/attention.h kept_positions). Full layers
// hold slot p = position p and are counted on the host without a read; sparse layers' slots are
// read from the position pool (pos_pool, written by the sparse kernels beside the scores). A
// step that asks for no census does nothing here: no copy, no sync.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "cuda/backend/backend_impl.h"
#include "runtime/kept_positions.h"
#include "runtime/step_plan_check.h"

namespace strata::cuda {

void CudaBackendImpl::collect_kept(const StepPlan& plan, StepResult& result) {
  const int heads = mc.num_key_value_heads;
  const int per_page = heads * kBlockSize;
  // The layers' states after this step (the state rule) and the pages their valid slots use.
  struct Census {
    std::size_t seq = 0;
    std::vector<LayerSlots> after;
    std::int32_t tokens = 0;
  };
  std::vector<Census> todo;
  std::vector<std::int32_t> pages;                 // distinct pages to read, in first-seen order
  std::unordered_map<std::int32_t, int> page_row;  // page id -> row of the gathered buffer
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const SeqStep& s = plan.seqs[i];
    if (!s.report_kept) continue;
    Census c;
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
        if (page_row.emplace(page, static_cast<int>(pages.size())).second) pages.push_back(page);
      }
    }
    todo.push_back(std::move(c));
  }
  if (todo.empty()) return;

  std::vector<std::int32_t> host(pages.size() * static_cast<std::size_t>(per_page));
  if (!pages.empty()) {
    if (census_pages.size() < pages.size()) {
      census_pages = DeviceArray<std::int32_t>(pages.size() * 2);
      census_out = DeviceArray<std::int32_t>(pages.size() * 2 * static_cast<std::size_t>(per_page));
    }
    CUDA_CHECK(cudaMemcpyAsync(census_pages.get(), pages.data(),
                               pages.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                               stream));
    CUDA_CHECK(sparse::launch_gather_positions(pos_pool.get(), census_pages.get(),
                                               static_cast<int>(pages.size()), per_page,
                                               census_out.get(), stream));
    CUDA_CHECK(cudaMemcpyAsync(host.data(), census_out.get(), host.size() * sizeof(std::int32_t),
                               cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  for (const Census& c : todo) {
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
              static_cast<std::size_t>(page_row.at(ls.pages[static_cast<std::size_t>(k)]));
          const int n = std::min(kBlockSize, ls.valid - k * kBlockSize);
          for (int h = 0; h < heads; ++h) {
            const std::int32_t* slot =
                host.data() + row * per_page + static_cast<std::size_t>(h) * kBlockSize;
            for (int j = 0; j < n; ++j) count.add(slot[j]);
          }
        }
      }
      kept[l] = count.result();
    }
  }
}

}  // namespace strata::cuda
