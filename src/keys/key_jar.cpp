// SPDX-License-Identifier: Apache-2.0
// The key jar: where key objects live (kernel: the key_jar kmem_cache, security/keys/key.c).
// Keys are allocated in slabs of 256 and freed onto a free list, never back to malloc: the
// collector frees keys in the order they were made, and malloc coalesced those adjacent
// frees into large chunks - each such free of 64 KiB or more consolidated every fastbin
// (glibc's malloc_consolidate), so destroying one chunk of 64 keys took 4-5 ms of CPU.
// From the jar a free is a few pointer writes under one lock. Memory is kept for reuse
// (the most keys ever alive at once), as a slab cache keeps its slabs until shrunk.
// The sanitizer builds use plain new/delete, so ASan still sees every use after free.
//
// Protection legend: L(lock) = under jar::lock; slabs are never freed (reachable from here,
// so leak checkers see them).
#include <cstddef>
#include <new>
#include <vector>

#include "../base/mutex.hpp"
#include "internal.hpp"

namespace quiesce::keys::detail {

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool use_jar = false;
#else
constexpr bool use_jar = true;
#endif

struct free_key {
  free_key* next;
};
static_assert(sizeof(key) >= sizeof(free_key));

constexpr std::size_t slab_keys = 256;

struct jar {
  quiesce::detail::mutex lock{"keys key_jar"};
  free_key* free QUIESCE_GUARDED_BY(lock) = nullptr;
  std::vector<void*> slabs QUIESCE_GUARDED_BY(lock);
};

jar& the_jar() {
  static jar* const j = new jar;  // never destroyed: keys may be freed until the end
  return *j;
}

}  // namespace

void* key::operator new(std::size_t size) {
  if (!use_jar || size != sizeof(key)) return ::operator new(size);
  jar& j = the_jar();
  quiesce::detail::lock_guard guard(j.lock);
  if (j.free == nullptr) {
    auto* slab = static_cast<unsigned char*>(
        ::operator new (sizeof(key) * slab_keys, std::align_val_t{alignof(key)}));
    j.slabs.push_back(slab);
    for (std::size_t i = slab_keys; i-- > 0;) {
      auto* n = reinterpret_cast<free_key*>(slab + i * sizeof(key));
      n->next = j.free;
      j.free = n;
    }
  }
  free_key* n = j.free;
  j.free = n->next;
  return n;
}

void key::operator delete(void* p, std::size_t size) noexcept {
  if (!use_jar || size != sizeof(key)) return ::operator delete(p);
  jar& j = the_jar();
  auto* n = static_cast<free_key*>(p);
  quiesce::detail::lock_guard guard(j.lock);
  n->next = j.free;
  j.free = n;
}

}  // namespace quiesce::keys::detail
