// <schema:math>
// my_ops::scaled_row_sum, the math alone (no PyTorch, no ONNX Runtime): both bindings
// call these functions, so they agree by construction.  For x (rows, cols), an
// optional weight (cols) and an attribute scale:
//   sum[i]    = scale * sum_j weight[j] * x[i, j]     (weight 1 when absent)
//   argmax[i] = the first j with the largest weight[j] * x[i, j]
// Throw std::invalid_argument for an input the math refuses: PyTorch raises a
// ValueError with its text, ORT returns it as an INVALID_ARGUMENT status.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel.h"

// The attributes, checked once per ORT session (and on each PyTorch call).
inline void check_scaled_row_sum_attributes(double scale) {
  if (!std::isfinite(scale))
    throw std::invalid_argument("scaled_row_sum: scale must be finite, got " + std::to_string(scale));
}

// The outputs are allocated with the declared shapes (sizes.h checked the inputs').
// Rows are independent: parallel_for hands out ranges of them, each written by one
// call from x and weight alone, so any thread count gives the same outputs.
template <typename T>
void scaled_row_sum(const T* x, const T* weight, double scale, int64_t rows, int64_t cols, T* sum,
                    int64_t* argmax, const ParallelFor& parallel_for) {
  if (cols < 1) throw std::invalid_argument("scaled_row_sum: x needs at least one column for argmax, got 0");
  const int64_t grain = std::max<int64_t>(1, 16384 / cols);  // rows worth a thread: ~16k multiply-adds
  parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * cols;
      double total = 0;  // double: the sum of many floats keeps its precision
      int64_t best = 0;
      T best_term = weight ? weight[0] * row[0] : row[0];
      for (int64_t j = 0; j < cols; ++j) {
        const T term = weight ? weight[j] * row[j] : row[j];
        total += term;
        if (term > best_term) best_term = term, best = j;  // ">" keeps the first of equal terms
      }
      sum[i] = static_cast<T>(scale * total);
      argmax[i] = best;
    }
  });
}
// </schema:math>
