#include "runtime/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <boost/json.hpp>
#include <cstring>
#include <fstream>

#include "runtime/error.h"
#include "runtime/fp8.h"

namespace strata {
namespace json = boost::json;

const char* to_string(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

std::size_t dtype_bytes(DType d) {
  switch (d) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
  }
  return 0;
}

float bf16_to_float(std::uint16_t v) {
  return std::bit_cast<float>(std::uint32_t(v) << 16);
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  std::uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --exp;
      }
      out = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void TensorView::to_float(float* out) const {
  const std::int64_t n = numel();
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, data, n * 4);
      break;
    case DType::kBF16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t v;
        std::memcpy(&v, data + 2 * i, 2);
        out[i] = bf16_to_float(v);
      }
      break;
    case DType::kF16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t v;
        std::memcpy(&v, data + 2 * i, 2);
        out[i] = fp16_to_float(v);
      }
      break;
    case DType::kF8E4M3:
      for (std::int64_t i = 0; i < n; ++i)
        out[i] = e4m3_to_float(std::to_integer<std::uint8_t>(data[i]));
      break;
  }
}

std::vector<float> TensorView::to_float() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  to_float(out.data());
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ModelError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw ModelError(path + ": cannot stat");
  }
  map_size_ = static_cast<std::size_t>(st.st_size);
  if (map_size_ < 8) {
    ::close(fd);
    throw ModelError(path + ": truncated file (" + std::to_string(map_size_) +
                     " bytes, no safetensors header)");
  }
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw ModelError(path + ": mmap failed");
  }
  try {
    const auto* base = static_cast<const std::byte*>(map_);
    std::uint64_t header_len = 0;
    std::memcpy(&header_len, base, 8);  // little-endian on every supported host
    if (header_len > map_size_ - 8 || header_len > (100u << 20))
      throw ModelError(path + ": bad header length " + std::to_string(header_len) + " (file has " +
                       std::to_string(map_size_) + " bytes)");
    json::value hv;
    try {
      hv = json::parse(std::string_view(reinterpret_cast<const char*>(base + 8), header_len));
    } catch (const std::exception& e) {
      throw ModelError(path + ": bad header: invalid JSON: " + e.what());
    }
    if (!hv.is_object()) throw ModelError(path + ": bad header: not a JSON object");
    const std::byte* data = base + 8 + header_len;
    const std::size_t data_size = map_size_ - 8 - header_len;
    for (const auto& [key, val] : hv.as_object()) {
      const std::string name(key);
      if (name == "__metadata__") continue;
      auto bad = [&](const std::string& why) {
        return ModelError(path + ": tensor '" + name + "': " + why);
      };
      if (!val.is_object()) throw bad("bad header entry");
      const auto& o = val.as_object();
      const auto* dt = o.if_contains("dtype");
      const auto* shp = o.if_contains("shape");
      const auto* off = o.if_contains("data_offsets");
      if (!dt || !dt->is_string() || !shp || !shp->is_array() || !off || !off->is_array() ||
          off->as_array().size() != 2)
        throw bad("bad header entry (needs dtype, shape, data_offsets)");
      TensorView t;
      t.name = name;
      t.file = path;
      const std::string ds(dt->as_string());
      if (ds == "F32")
        t.dtype = DType::kF32;
      else if (ds == "F16")
        t.dtype = DType::kF16;
      else if (ds == "BF16")
        t.dtype = DType::kBF16;
      else if (ds == "F8_E4M3")
        t.dtype = DType::kF8E4M3;
      else
        throw bad("unsupported dtype " + ds + " (supported: F32, F16, BF16, F8_E4M3)");
      for (const auto& d : shp->as_array()) {
        if (!d.is_int64() || d.as_int64() < 0) throw bad("bad shape");
        t.shape.push_back(d.as_int64());
      }
      const auto& oa = off->as_array();
      if (!oa[0].is_int64() || !oa[1].is_int64()) throw bad("bad data_offsets");
      const auto b = oa[0].as_int64(), e = oa[1].as_int64();
      if (b < 0 || e < b) throw bad("bad data_offsets");
      if (static_cast<std::uint64_t>(e) > data_size)
        throw bad("truncated file: data ends at byte " + std::to_string(e) + " of " +
                  std::to_string(data_size));
      t.bytes = static_cast<std::size_t>(e - b);
      if (static_cast<std::size_t>(t.numel()) * dtype_bytes(t.dtype) != t.bytes)
        throw bad("data size " + std::to_string(t.bytes) + " does not match shape and dtype");
      t.data = data + b;
      tensors_.emplace(name, std::move(t));
    }
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw ModelError(path + ": writing " + to_string(dtype) +
                     " is not supported (use BF16 or F32)");
  json::object header;
  std::size_t offset = 0;
  const std::size_t eb = dtype_bytes(dtype);
  auto numel = [](const TensorToWrite& t) {
    std::size_t n = 1;
    for (auto d : t.shape) n *= static_cast<std::size_t>(d);
    return n;
  };
  for (const auto& t : tensors) {
    json::object e;
    e["dtype"] = to_string(dtype);
    json::array shape;
    for (auto d : t.shape) shape.push_back(d);
    e["shape"] = shape;
    const std::size_t bytes = numel(t) * eb;
    e["data_offsets"] = json::array{offset, offset + bytes};
    header[t.name] = e;
    offset += bytes;
  }
  header["__metadata__"] = json::object{{"format", "pt"}};
  std::string hs = json::serialize(header);
  while ((hs.size() + 8) % 8 != 0) hs.push_back(' ');
  std::ofstream f(path, std::ios::binary);
  if (!f) throw ModelError(path + ": cannot write");
  const std::uint64_t len = hs.size();
  f.write(reinterpret_cast<const char*>(&len), 8);
  f.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  constexpr std::size_t kChunk = 1 << 20;
  std::vector<float> vals(kChunk);
  std::vector<char> buf(kChunk * 4);
  for (const auto& t : tensors) {
    const std::size_t n = numel(t);
    for (std::size_t b = 0; b < n; b += kChunk) {
      const std::size_t m = std::min(kChunk, n - b);
      t.fill(b, m, vals.data());
      if (dtype == DType::kF32) {
        std::memcpy(buf.data(), vals.data(), m * 4);
      } else {
        for (std::size_t i = 0; i < m; ++i) {
          const std::uint16_t v = float_to_bf16(vals[i]);
          std::memcpy(buf.data() + 2 * i, &v, 2);
        }
      }
      f.write(buf.data(), static_cast<std::streamsize>(m * eb));
    }
  }
  if (!f) throw ModelError(path + ": write failed");
}

}  // namespace strata
