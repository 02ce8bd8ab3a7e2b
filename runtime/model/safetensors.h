// Memory-mapped safetensors files and a read-only tensor view. Errors name the file and
// the tensor (ModelError); nothing here crashes on a truncated or malformed file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata {

// kF8E4M3: safetensors "F8_E4M3", OCP e4m3 codes (runtime/fp8.h), one byte each — the
// linear weights of a pre-quantized checkpoint (runtime/model/quantization_config.h).
enum class DType : std::uint8_t { kF32, kF16, kBF16, kF8E4M3 };
const char* to_string(DType d);  // the safetensors spelling: "F32", "F16", "BF16", "F8_E4M3"
std::size_t dtype_bytes(DType d);

// A view into mapped memory; valid while its file is alive.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::string file;  // for error messages

  std::int64_t numel() const;
  // Converts (any dtype) to fp32: out.size() == numel(). Exact for every dtype; an F8_E4M3
  // tensor gives its decoded codes (e4m3_to_float), *unscaled*: a checkpoint's weight_scale
  // is applied by its consumer (runtime/model/model_loader.h, Fp8Weight).
  void to_float(float* out) const;
  std::vector<float> to_float() const;
};

float bf16_to_float(std::uint16_t v);
std::uint16_t float_to_bf16(float f);  // round to nearest even
float fp16_to_float(std::uint16_t v);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws ModelError
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
};

// Writes tensors as a safetensors file in `dtype` (F32 or BF16), streaming: `fill(begin, n, out)`
// produces elements [begin, begin+n) of the tensor in fp32, so huge models never sit in memory.
struct TensorToWrite {
  std::string name;
  std::vector<std::int64_t> shape;
  std::function<void(std::size_t begin, std::size_t n, float* out)> fill;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       DType dtype);

}  // namespace strata
