#include "kernels/host/host_context.h"

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "engine/core/error.h"

namespace dpe::host {

CacheKey::CacheKey(int64_t tag, std::initializer_list<int64_t> fields) {
  DPE_CHECK(static_cast<int>(fields.size()) + 2 <= kMaxFields,
            "HostContext: cache key of " << fields.size() << " fields is too long");
  v_[n_++] = tag;
  v_[n_++] = omp_get_max_threads();
  for (int64_t f : fields) v_[n_++] = f;
}

bool CacheKey::operator==(const CacheKey& o) const {
  if (n_ != o.n_) return false;
  for (int i = 0; i < n_; ++i) {
    if (v_[i] != o.v_[i]) return false;
  }
  return true;
}

size_t CacheKey::hash() const {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n_; ++i) h = (h ^ static_cast<uint64_t>(v_[i])) * 1099511628211ull;
  return static_cast<size_t>(h);
}

namespace {
struct KeyHash {
  size_t operator()(const CacheKey& k) const { return k.hash(); }
};
}  // namespace

struct HostContext::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<CacheKey, std::unique_ptr<CacheEntry>, KeyHash> cache;
};

HostContext::HostContext() : impl_(std::make_unique<Impl>()) {}
HostContext::~HostContext() = default;

dnnl::engine& HostContext::engine() { return impl_->engine; }
dnnl::stream& HostContext::stream() { return impl_->stream; }
size_t HostContext::cache_size() const { return impl_->cache.size(); }

HostContext::CacheEntry* HostContext::find(const CacheKey& key) {
  auto it = impl_->cache.find(key);
  return it == impl_->cache.end() ? nullptr : it->second.get();
}

HostContext::CacheEntry& HostContext::insert(const CacheKey& key,
                                             std::unique_ptr<CacheEntry> entry) {
  CacheEntry& ref = *entry;
  impl_->cache[key] = std::move(entry);
  return ref;
}

}  // namespace dpe::host
