// geo::sq_dist's math, shared by the torch op and the ORT op: no torch, no ORT.
//   out[i] = sum_j (a[i, j] - b[i, j])^2   for rows begin..end of (n, d) row-major a, b
#pragma once
#include <cstdint>

namespace geo {

inline void sq_dist(const float* a, const float* b, float* out, int64_t begin, int64_t end,
                    int64_t d) {
  for (int64_t i = begin; i < end; ++i) {
    float sum = 0.0f;
    for (int64_t j = 0; j < d; ++j) {
      const float diff = a[i * d + j] - b[i * d + j];
      sum += diff * diff;
    }
    out[i] = sum;
  }
}

}  // namespace geo
