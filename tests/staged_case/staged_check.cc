// Drives StagedQueue (csrc/kernels/parallel.h) the way the deform_conv2d
// backward does: threads claim tasks until none is left, and a task may
// start only when every task of the earlier stages has finished.  The last
// task of each stage sleeps, so that a queue that did not wait would let the
// next stage start early.  Prints "ok: ..." per case; exits 1 on a failure.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "parallel.h"

using customops::StagedQueue;

// stages[s] tasks in stage s, run by `threads` threads.
bool run_case(const std::vector<int64_t>& stages, int threads) {
  std::vector<int64_t> ready, stage_of;
  for (size_t s = 0; s < stages.size(); ++s) {
    const int64_t start = static_cast<int64_t>(ready.size());
    for (int64_t i = 0; i < stages[s]; ++i) ready.push_back(start), stage_of.push_back(s);
  }
  const int64_t n = static_cast<int64_t>(ready.size());
  std::vector<std::atomic<int>> runs(n), finished(n);
  std::atomic<bool> early{false};
  StagedQueue queue(ready);
  auto body = [&] {
    for (int64_t i; (i = queue.claim()) >= 0; queue.finish()) {
      for (int64_t j = 0; j < ready[i]; ++j)
        if (!finished[j].load()) early = true;
      runs[i]++;
      const bool last = i + 1 == n || stage_of[i + 1] != stage_of[i];
      if (last) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      finished[i] = 1;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(body);
  for (auto& t : pool) t.join();
  for (int64_t i = 0; i < n; ++i)
    if (runs[i].load() != 1) {
      std::printf("FAIL: task %lld ran %d times\n", static_cast<long long>(i), runs[i].load());
      return false;
    }
  if (early) {
    std::printf("FAIL: a task started before an earlier stage finished (%d threads)\n", threads);
    return false;
  }
  return true;
}

int main() {
  const std::vector<int64_t> bands = {7, 5, 7, 5, 1, 3, 7, 5};  // tiles, then B/C tasks, per band
  bool ok = true;
  for (int threads : {1, 2, 4}) {
    if (run_case(bands, threads)) {
      std::printf("ok: %d threads, every task once, stages in order\n", threads);
    } else {
      ok = false;
    }
  }
  if (run_case({}, 2)) std::printf("ok: no tasks\n"); else ok = false;
  return ok ? 0 : 1;
}
