#include "my_add.h"

namespace customops {

void my_add_check(const Shape& a_shape, const Shape& b_shape) {
  check(a_shape == b_shape, "my_add", "b must have the shape of a ",
        to_string(a_shape), ", got ", to_string(b_shape));
}

void my_add(const float* a, const float* b, int64_t count, float* out,
            const ParallelFor& parallel_for) {
  // Memory-bound: a thread only pays off for large slices.
  constexpr int64_t kGrain = 1 << 16;
  parallel_for(count, kGrain, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = 2.0f * a[i] + b[i];
  });
}

}  // namespace customops
