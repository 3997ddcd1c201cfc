// The parallel loop the math receives.  The math knows neither PyTorch nor ONNX
// Runtime, so it cannot pick a thread pool itself: each binding passes one that
// runs on its runtime's own threads, and the thread count is set the runtime's
// way, never by the math:
//   the PyTorch op:  at::parallel_for              (torch.set_num_threads)
//   the ORT op:      the kernel context's ParallelFor, on the session's intra-op pool
//                    (SessionOptions.intra_op_num_threads)
//
//   parallel_for(begin, end, grain, fn)
//
// calls fn(b, e) on disjoint ranges [b, e) that together cover [begin, end), on
// several threads at once when there are enough items, and returns when every call
// is done, rethrowing an exception a call threw.  grain is the fewest items worth a
// thread: a range of at most grain items runs in one call on the calling thread.
// Choose it so that grain items take some microseconds (a few thousand
// multiply-adds): smaller ranges cost more to hand out than they save.
//
// Where the ranges split depends on the runtime and its thread count.  So that the
// outputs are the same at any thread count, fn(b, e) writes only the outputs of
// items b..e-1, computed from the inputs alone: no write to anything another item
// writes or reads, no sum across items (reduce inside an item, or in a serial loop
// after the parallel one).  Call it from the math's own thread, not from inside fn.
#pragma once
#include <cstdint>
#include <functional>

using ParallelFor = std::function<void(int64_t begin, int64_t end, int64_t grain,
                                       const std::function<void(int64_t, int64_t)>& fn)>;
