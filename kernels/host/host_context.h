// HostContext: what one host device's kernels share — a oneDNN CPU engine and stream, and a cache
// of per-shape kernel state (oneDNN primitives, their memory objects and scratchpads), so a
// training step creates no primitive and allocates no scratch after its first iteration. The
// cache keeps every shape it has seen (a handful per model: a smaller last batch adds one set).
//
// Threading contract: a HostContext is used by one thread at a time (engine/backend/host_backend
// serialises the calls per device). oneDNN runs with the OpenMP thread count of the calling thread;
// cached primitives are keyed by that count, so a change of thread count builds new ones.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>

// oneDNN's types stay out of this header: kernel .cc files include <oneapi/dnnl/dnnl.hpp>.
namespace dnnl {
struct engine;
struct stream;
}  // namespace dnnl

namespace dpe::host {

// Identifies one cached kernel state: which kernel (a tag) and the sizes it was built for.
class CacheKey {
 public:
  static constexpr int kMaxFields = 20;
  CacheKey(int64_t tag, std::initializer_list<int64_t> fields);
  bool operator==(const CacheKey& o) const;
  size_t hash() const;

 private:
  std::array<int64_t, kMaxFields> v_{};
  int n_ = 0;
};

class HostContext {
 public:
  // Base of every cached state; kernels derive from it.
  struct CacheEntry {
    virtual ~CacheEntry() = default;
  };

  HostContext();
  ~HostContext();
  HostContext(const HostContext&) = delete;
  HostContext& operator=(const HostContext&) = delete;

  dnnl::engine& engine();
  dnnl::stream& stream();

  // The entry for `key`, made by `make()` (returning std::unique_ptr<T>) on first use.
  // The OpenMP thread count of the calling thread is part of the key.
  template <typename T, typename Make>
  T& cached(const CacheKey& key, Make&& make) {
    if (CacheEntry* e = find(key)) return static_cast<T&>(*e);
    return static_cast<T&>(insert(key, make()));
  }
  size_t cache_size() const;

 private:
  CacheEntry* find(const CacheKey& key);
  CacheEntry& insert(const CacheKey& key, std::unique_ptr<CacheEntry> entry);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpe::host
