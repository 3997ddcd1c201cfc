// my_add(a, b) = 2 * a + b, element-wise over float32 buffers of one shape.
#pragma once

#include <cstdint>

#include "parallel.h"
#include "shape.h"

namespace customops {

// Throws std::invalid_argument unless a and b have the same shape.
void my_add_check(const Shape& a_shape, const Shape& b_shape);

void my_add(const float* a, const float* b, int64_t count, float* out,
            const ParallelFor& parallel_for);

}  // namespace customops
