#include "thread_pool.h"

#include <algorithm>

namespace customops::ort {

ParallelFor parallel_for_of(const Ort::KernelContext& context) {
  return [context](int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& body) {
    if (n <= 0) return;
    // Enough chunks to balance the pool's threads, few enough that each one
    // amortises its scheduling; ORT picks the threads.
    constexpr int64_t kMaxChunks = 64;
    const int64_t chunks = std::min(kMaxChunks, (n + std::max<int64_t>(grain, 1) - 1) /
                                                    std::max<int64_t>(grain, 1));
    if (chunks <= 1) {
      body(0, n);
      return;
    }
    struct Job {
      int64_t n, chunks;
      const std::function<void(int64_t, int64_t)>* body;
    } job{n, chunks, &body};
    context.ParallelFor(
        [](void* data, size_t i) {
          const Job& j = *static_cast<const Job*>(data);
          const int64_t chunk = static_cast<int64_t>(i);
          (*j.body)(j.n * chunk / j.chunks, j.n * (chunk + 1) / j.chunks);
        },
        static_cast<size_t>(chunks), 0, &job);
  };
}

}  // namespace customops::ort
