// The session's intra-op thread pool as the kernels' ParallelFor.
#pragma once

#include "ort_api.h"
#include "../kernels/parallel.h"

namespace customops::ort {

// A ParallelFor that runs on the session's intra-op thread pool.
ParallelFor parallel_for_of(const Ort::KernelContext& context);

}  // namespace customops::ort
