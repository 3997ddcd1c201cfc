// How a kernel asks its caller for threads.
//
// The kernels in this folder know nothing about PyTorch or ONNX Runtime, so
// they cannot pick a thread pool themselves.  Each binding passes a
// ParallelFor that runs on the pool its framework owns: at::parallel_for in
// the PyTorch extension, the session's intra-op pool
// (OrtApi::KernelContext_ParallelFor) in the ONNX Runtime library.  Thread
// counts are therefore set the usual way (torch.set_num_threads,
// SessionOptions.intra_op_num_threads), never by the kernel.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace customops {

// Calls body(begin, end) on disjoint ranges that together cover [0, n),
// possibly on several threads at once, and returns when all calls are done.
// `grain` is the smallest range worth handing to one thread.
using ParallelFor = std::function<void(
    int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body)>;

// Tasks 0..n-1 handed out one at a time, to whichever thread asks next.
// Run by calling parallel_for(n, 1, body) with a body that claims tasks
// until none is left, ignoring its range: a thread that starts its part late
// (with passive waiting, a loop of 100 us of work took 158-310 us on a
// 2-core virtual machine) then takes fewer tasks, where parallel_for's fixed
// ranges make the whole loop wait for its range.
// Only for tasks that write disjoint outputs, so that the results do not
// depend on which thread runs which task.
class TaskQueue {
 public:
  explicit TaskQueue(int64_t n) : n_(n) {}
  int64_t size() const { return n_; }
  // The next unclaimed task, or -1 when all are claimed.
  int64_t claim() {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    return i < n_ ? i : -1;
  }

 private:
  const int64_t n_;
  std::atomic<int64_t> next_{0};
};

// Tasks 0..n-1 claimed in order, as by TaskQueue, in stages: task i may
// start once `ready[i]` tasks have finished, which is the index of the first
// task of its stage.  So phases that depend on each other run as one
// parallel loop, without the wake-ups and the wait for the slowest thread
// that a loop per phase costs (see TaskQueue: with passive waiting, a loop
// of 100 us of work took 158-310 us).  claim() waits for the claimed task's
// stage; call finish() after each claimed task, and never leave one
// unfinished (an exception in a task would make the others wait forever).
// Otherwise it never deadlocks: the tasks of earlier stages were claimed
// before, by threads that are running them.  The finished count can only
// reach the first index of a stage once every task before it has finished,
// because no task of that stage or a later one finishes before it.
class StagedQueue {
 public:
  explicit StagedQueue(const std::vector<int64_t>& ready) : ready_(ready) {}
  int64_t size() const { return static_cast<int64_t>(ready_.size()); }
  // The next task, once its stage may start, or -1 when all are claimed.
  int64_t claim() {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= size()) return -1;
    // Spin briefly (a stage's last task is short), then let others run.
    for (int spins = 0; finished_.load(std::memory_order_acquire) < ready_[i]; ++spins)
      if (spins >= kSpins) std::this_thread::yield();
    return i;
  }
  void finish() { finished_.fetch_add(1, std::memory_order_release); }

 private:
  static constexpr int kSpins = 1000;
  const std::vector<int64_t>& ready_;
  // On lines of their own: every claim writes next_ while waiting threads read finished_.
  alignas(64) std::atomic<int64_t> next_{0};
  alignas(64) std::atomic<int64_t> finished_{0};
};

// A ParallelFor that runs everything on the calling thread: for work that is
// already one task of an outer parallel loop.
inline void serial_for(int64_t n, int64_t /*grain*/,
                       const std::function<void(int64_t, int64_t)>& body) {
  if (n > 0) body(0, n);
}

}  // namespace customops
