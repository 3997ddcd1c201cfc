// my_add(a, b) = 2 * a + b, element-wise over buffers of one shape and one
// dtype: float32, float64, or float16 (computed in float32, rounded once).
#pragma once

#include <cstdint>

#include "half.h"
#include "parallel.h"
#include "shape.h"

namespace customops {

// Throws std::invalid_argument unless a and b have the same shape.
void my_add_check(const Shape& a_shape, const Shape& b_shape);

void my_add(const float* a, const float* b, int64_t count, float* out,
            const ParallelFor& parallel_for);
void my_add(const double* a, const double* b, int64_t count, double* out,
            const ParallelFor& parallel_for);
void my_add(const Half* a, const Half* b, int64_t count, Half* out,
            const ParallelFor& parallel_for);

}  // namespace customops
