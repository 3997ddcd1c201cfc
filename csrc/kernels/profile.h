// Phase timers for the deform_conv2d kernels, read by bench/step_profile.py.
//
// Off unless a binding turns them on (the PyTorch extension's
// customops._C.profile_start): a PhaseTimer then costs one relaxed load of
// a global flag and a predictable branch.  They sit around whole phases
// (a tap of a tile, a GEMM call, a task, a parallel loop), never inside a
// per-pixel or per-channel loop, so even when on they add a few hundred
// clock reads per image.  Each library that compiles the kernels has its own
// counters; only the PyTorch extension exposes them.
//
// Two kinds of figure: the time threads spent inside a phase, summed over
// the threads (inside parallel loops), and the wall time of a parallel loop
// as the calling thread saw it (the loop phases below), which includes the
// wait for the slowest thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace customops {

enum class Phase {
  // forward
  kForwardPack,      // weights packed for the GEMM, bias padded
  kForwardCopy,      // input copied channels last (wall)
  kForwardSample,    // bilinear weights and corners of each tap (sample_tap)
  kForwardGather,    // im2col rows from the four corners (blend)
  kForwardGemm,      // output = columns * weights
  kForwardLoop,      // the tile loop (wall)
  // backward
  kBackwardPack,     // weights packed, grad_output transposed per tile, grad_W unpacked
  kBackwardCopy,     // input channels last, input gradient back planar (wall)
  kBackwardZero,     // the input gradient zeroed (wall)
  kBackwardGemmG,    // G = grad_output^T * W
  kBackwardSample,   // bilinear weights and corners (sample_tap), corners kept
  kBackwardGather,   // im2col columns + the four corner dot products (blend_dot),
                     // and the offset and mask gradients from them
  kBackwardScatter,  // input gradient: G onto the corners (phase B)
  kBackwardGemmW,    // grad_W += grad_output * columns (phase C), bias gradient
  kBackwardLoop,     // the loop over the bands' phases A, B and C (wall)
  kCount
};

struct PhaseCounters {
  std::atomic<bool> on{false};
  std::atomic<int64_t> nanoseconds[static_cast<int>(Phase::kCount)] = {};
  std::atomic<int64_t> calls[static_cast<int>(Phase::kCount)] = {};
  std::atomic<int64_t> flops[static_cast<int>(Phase::kCount)] = {};
};

inline PhaseCounters& phase_counters() {
  static PhaseCounters counters;
  return counters;
}

// Adds the time from construction to destruction to `phase` when the
// counters are on (decided at construction).
class PhaseTimer {
 public:
  explicit PhaseTimer(Phase phase, int64_t flops = 0) {
    if (__builtin_expect(phase_counters().on.load(std::memory_order_relaxed), 0)) {
      phase_ = static_cast<int>(phase);
      flops_ = flops;
      start_ = std::chrono::steady_clock::now();
    }
  }
  ~PhaseTimer() { stop(); }
  // Ends the phase early (the destructor then adds nothing).
  void stop() {
    if (__builtin_expect(phase_ >= 0, 0)) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - start_).count();
      PhaseCounters& c = phase_counters();
      c.nanoseconds[phase_].fetch_add(ns, std::memory_order_relaxed);
      c.calls[phase_].fetch_add(1, std::memory_order_relaxed);
      c.flops[phase_].fetch_add(flops_, std::memory_order_relaxed);
      phase_ = -1;
    }
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  int phase_ = -1;
  int64_t flops_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace customops
