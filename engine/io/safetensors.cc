#include "engine/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/json_nesting.h"

namespace dpe {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian data; dpe writes host memory as it is");

namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MiB, the reference implementation's cap
constexpr const char* kMetadataKey = "__metadata__";
// A safetensors header nests three deep (header, entry, shape); deeper input is rejected before
// the JSON parser sees it, so a crafted header cannot exhaust the stack (safetensors_test feeds
// it 65 000 levels).
constexpr int kMaxHeaderDepth = 8;

// Throws unless `text` nests objects and arrays at most kMaxHeaderDepth deep.
void check_nesting(const std::string& text, const std::string& where) {
  DPE_CHECK(json_nesting_depth(text, kMaxHeaderDepth) <= kMaxHeaderDepth,
            where << "the header nests deeper than " << kMaxHeaderDepth
                  << " levels (not a safetensors header)");
}

// A JSON value for an error message, never longer than about 100 characters whatever the input:
// short scalars and short arrays of scalars as they are, anything else described.
std::string brief(const OrderedJson& v) {
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    return str.size() <= 40 ? v.dump() : "a string of " + std::to_string(str.size()) + " bytes";
  }
  if (v.is_primitive()) return v.dump();
  if (v.is_array() && v.size() <= 8) {
    bool scalars = true;
    for (const auto& x : v) scalars = scalars && x.is_number();
    if (scalars) return v.dump();
  }
  return std::string(v.is_array() ? "an array of " : "an object of ") +
         std::to_string(v.size()) + (v.is_array() ? " elements" : " keys");
}

// The format's dtype tags (safetensors' "F32", "I64", "BF16", "F16").
const char* dtype_code(DType t) {
  switch (t) {
    case DType::kFloat32: return "F32";
    case DType::kInt64: return "I64";
    case DType::kBFloat16: return "BF16";
    case DType::kFloat16: return "F16";
  }
  return "?";
}

bool parse_dtype(const std::string& code, DType* out) {
  for (DType t : kAllDTypes) {
    if (code == dtype_code(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

std::string errno_text() { return std::strerror(errno); }

// save_safetensors' words for the step of its atomic write that failed; each names the file.
[[noreturn]] void throw_save_error(const AtomicFileError& e) {
  const std::string& tmp = e.temporary();
  switch (e.step()) {
    case AtomicFileStep::kCreate:
      DPE_THROW("save_safetensors: cannot create a temporary file next to " << e.target() << ": "
                                                                            << e.reason());
    case AtomicFileStep::kWrite:
      DPE_THROW("save_safetensors: writing " << e.target() << " (temporary " << tmp
                                             << ") failed: " << e.reason());
    case AtomicFileStep::kSync:
      DPE_THROW("save_safetensors: flushing " << tmp << " failed: " << e.reason());
    case AtomicFileStep::kClose:
      DPE_THROW("save_safetensors: closing " << tmp << " failed: " << e.reason());
    case AtomicFileStep::kRename:
      DPE_THROW("save_safetensors: renaming " << tmp << " to " << e.target()
                                              << " failed: " << e.reason());
  }
  throw e;
}

// A file opened for reading, closed on destruction.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    DPE_CHECK(fd_ >= 0, "load_safetensors: cannot open " << path << ": " << errno_text());
    struct stat st;
    DPE_CHECK(::fstat(fd_, &st) == 0,
              "load_safetensors: cannot stat " << path << ": " << errno_text());
    DPE_CHECK(S_ISREG(st.st_mode), "load_safetensors: " << path << " is not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }

  void read_at(void* dst, uint64_t bytes, uint64_t offset, const std::string& what) {
    char* out = static_cast<char*>(dst);
    while (bytes > 0) {
      const ssize_t got = ::pread(fd_, out, bytes, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      DPE_CHECK(got >= 0, "load_safetensors: " << path_ << ": reading " << what
                                               << " failed: " << errno_text());
      DPE_CHECK(got > 0, "load_safetensors: " << path_ << ": file ended while reading " << what);
      out += got;
      offset += static_cast<uint64_t>(got);
      bytes -= static_cast<uint64_t>(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

// Reads a non-negative integer JSON value, or explains why it is not one.
bool as_size(const OrderedJson& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return true;
}

Entry parse_entry(const std::string& path, const std::string& name, const OrderedJson& info,
                  uint64_t data_size) {
  const auto fail_prefix = [&] {
    return "load_safetensors: " + path + ": tensor '" + name + "': ";
  };
  DPE_CHECK(info.is_object(), fail_prefix() << "expected an object, got " << brief(info));
  Entry e;
  e.name = name;
  const auto dtype = info.find("dtype");
  DPE_CHECK(dtype != info.end() && dtype->is_string(), fail_prefix() << "missing string dtype");
  DPE_CHECK(parse_dtype(dtype->get<std::string>(), &e.dtype),
            fail_prefix() << "dtype " << dtype->get<std::string>()
                          << " is not supported (dpe reads F32, BF16, F16 and I64)");

  const auto shape = info.find("shape");
  DPE_CHECK(shape != info.end() && shape->is_array(), fail_prefix() << "missing shape array");
  uint64_t numel = 1;
  bool numel_overflow = false;
  for (const OrderedJson& d : *shape) {
    uint64_t dim = 0;
    DPE_CHECK(
        as_size(d, &dim) && dim <= static_cast<uint64_t>(INT64_MAX),
        fail_prefix() << "shape " << brief(*shape) << " must hold non-negative integers only");
    e.shape.push_back(static_cast<int64_t>(dim));
    numel_overflow = numel_overflow || __builtin_mul_overflow(numel, dim, &numel);
  }

  const auto offsets = info.find("data_offsets");
  DPE_CHECK(offsets != info.end() && offsets->is_array() && offsets->size() == 2 &&
                as_size((*offsets)[0], &e.begin) && as_size((*offsets)[1], &e.end),
            fail_prefix() << "data_offsets must be two non-negative integers [begin, end], got "
                          << (offsets == info.end() ? std::string("nothing") : brief(*offsets)));
  DPE_CHECK(e.begin <= e.end, fail_prefix() << "data_offsets [" << e.begin << ", " << e.end
                                            << "] end before they begin");
  DPE_CHECK(e.end <= data_size, fail_prefix() << "data_offsets [" << e.begin << ", " << e.end
                                              << "] reach past the data section of " << data_size
                                              << " bytes (the file is truncated or corrupt)");
  uint64_t expected = 0;
  numel_overflow = numel_overflow || __builtin_mul_overflow(numel, dtype_size(e.dtype), &expected);
  DPE_CHECK(
      !numel_overflow && e.end - e.begin == expected,
      fail_prefix() << "data_offsets [" << e.begin << ", " << e.end << "] hold " << e.end - e.begin
                    << " bytes but shape " << brief(*shape) << " of " << dtype->get<std::string>()
                    << " needs "
                    << (numel_overflow ? std::string("more than 2^64") : std::to_string(expected)));
  try {
    Shape(e.shape).contiguous_strides();  // a zero size hides overflowing others from numel
  } catch (const Error& err) {
    DPE_THROW(fail_prefix() << err.what());
  }
  return e;
}

}  // namespace

void save_safetensors(const std::string& path, const StateDict& tensors,
                      const SafetensorsSaveOptions& options) {
  OrderedJson header = OrderedJson::object();
  if (!options.metadata.empty()) {
    OrderedJson meta = OrderedJson::object();
    for (const auto& [key, value] : options.metadata) meta[key] = value;
    header[kMetadataKey] = std::move(meta);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    DPE_CHECK(!name.empty(), "save_safetensors: " << path << ": a tensor has an empty name");
    DPE_CHECK(name != kMetadataKey,
              "save_safetensors: " << path << ": the name " << kMetadataKey << " is reserved");
    DPE_CHECK(names.insert(name).second,
              "save_safetensors: " << path << ": tensor '" << name << "' appears twice");
    DPE_CHECK(tensor.defined(),
              "save_safetensors: " << path << ": tensor '" << name << "' is undefined");
    const uint64_t bytes = tensor.nbytes();
    header[name] = {{"dtype", dtype_code(tensor.dtype())},
                    {"shape", tensor.shape().dims()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Spaces up to a multiple of 8 keep the data section 8-byte aligned, as the reference does.
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));

  try {
    AtomicFile file(path);
    file.write(length, sizeof(length));
    file.write(text.data(), text.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i].second;
      // Host memory is addressable here; only other devices need a (counted) copy to host:0.
      const Tensor host = t.device().is_host() ? t.contiguous() : t.to(Device());
      file.write(host.raw_data(), host.nbytes());
      if (options.on_tensor_written) options.on_tensor_written(i, tensors[i].first);
    }
    file.commit();
  } catch (const AtomicFileError& e) {
    throw_save_error(e);
  }
}

SafetensorsContents read_safetensors(const std::string& path, Device device) {
  InputFile file(path);
  const std::string where = "load_safetensors: " + path + ": ";
  DPE_CHECK(file.size() >= 8, where << "the file is " << file.size()
                                    << " bytes, too short for the 8-byte header length");
  unsigned char length[8];
  file.read_at(length, 8, 0, "the header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | length[i];
  DPE_CHECK(header_len <= kMaxHeaderBytes,
            where << "header length " << header_len << " exceeds the " << kMaxHeaderBytes
                  << "-byte limit (not a safetensors file, or corrupt)");
  DPE_CHECK(header_len <= file.size() - 8, where << "header length " << header_len
                                                 << " is larger than the " << file.size() - 8
                                                 << " bytes after it (truncated or corrupt)");
  std::string text(header_len, '\0');
  file.read_at(text.data(), header_len, 8, "the header");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file.size() - data_start;

  check_nesting(text, where);
  // nlohmann keeps the last of repeated keys; the callback sees each top-level key first.
  std::set<std::string> seen;
  std::string repeated;
  OrderedJson header;
  try {
    header = OrderedJson::parse(
        text, [&](int depth, OrderedJson::parse_event_t event, OrderedJson& parsed) {
          if (depth == 1 && event == OrderedJson::parse_event_t::key && parsed.is_string()) {
            const std::string& key = parsed.get_ref<const std::string&>();
            if (!seen.insert(key).second && repeated.empty()) repeated = key;
          }
          return true;
        });
  } catch (const nlohmann::json::exception& e) {
    DPE_THROW(where << "the header is not valid JSON: " << e.what());
  }
  DPE_CHECK(header.is_object(),
            where << "the header must be a JSON object, got a " << header.type_name());
  DPE_CHECK(repeated.empty(), where << "tensor '" << repeated << "' appears twice in the header");

  SafetensorsContents out;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      DPE_CHECK(info.is_object(), where << kMetadataKey << " must be an object of strings");
      for (const auto& [key, value] : info.items()) {
        DPE_CHECK(value.is_string(), where << kMetadataKey << " must map strings to strings, but '"
                                           << key << "' holds " << brief(value));
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, name, info, data_size));
  }

  // Data order is save order; equal begins (empty tensors) keep their header order.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  const Entry* last = nullptr;  // the non-empty tensor reaching furthest so far
  for (const Entry& e : entries) {
    if (e.begin == e.end) continue;
    DPE_CHECK(last == nullptr || e.begin >= last->end,
              where << "tensor '" << e.name << "': data_offsets [" << e.begin << ", " << e.end
                    << "] overlap those of tensor '" << last->name << "' [" << last->begin << ", "
                    << last->end << "]");
    last = &e;
  }

  // Host devices are addressable: read straight into them; other devices go through host:0.
  const Device staging = device.is_host() ? device : Device();
  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(Shape(e.shape), e.dtype, staging);
    file.read_at(t.raw_data(), e.end - e.begin, data_start + e.begin,
                 "the data of tensor '" + e.name + "'");
    out.tensors.emplace_back(e.name, t.to(device));
  }
  return out;
}

StateDict load_safetensors(const std::string& path, Device device) {
  return read_safetensors(path, device).tensors;
}

}  // namespace dpe
