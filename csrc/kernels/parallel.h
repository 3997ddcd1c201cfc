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

#include <cstdint>
#include <functional>

namespace customops {

// Calls body(begin, end) on disjoint ranges that together cover [0, n),
// possibly on several threads at once, and returns when all calls are done.
// `grain` is the smallest range worth handing to one thread.
using ParallelFor = std::function<void(
    int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body)>;

// A ParallelFor that runs everything on the calling thread: for work that is
// already one task of an outer parallel loop.
inline void serial_for(int64_t n, int64_t /*grain*/,
                       const std::function<void(int64_t, int64_t)>& body) {
  if (n > 0) body(0, n);
}

}  // namespace customops
