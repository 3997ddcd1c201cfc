// my_ops::scaled_row_sum, the math alone (no PyTorch, no ONNX Runtime), so
// that the PyTorch op and the ORT op run this same code and give the same
// messages.  For x (rows, cols), an optional weight (cols) and an attribute
// scale:
//   sum[i]    = scale * sum_j weight[j] * x[i, j]     (weight 1 when absent)
//   argmax[i] = the first j with the largest weight[j] * x[i, j]
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

// Everything the kernel needs that a caller can get wrong, checked before any
// output is allocated.  std::invalid_argument: both bindings turn it into
// their own "bad argument" error (ValueError, ORT_INVALID_ARGUMENT).
inline void check_scaled_row_sum(int64_t cols, bool has_weight, int64_t weight_size, double scale) {
  if (cols < 1)
    throw std::invalid_argument("scaled_row_sum: x needs at least one column for argmax, got 0");
  if (has_weight && weight_size != cols)
    throw std::invalid_argument("scaled_row_sum: weight must have one value per column of x (" +
                                std::to_string(cols) + "), got " + std::to_string(weight_size));
  if (!std::isfinite(scale))
    throw std::invalid_argument("scaled_row_sum: scale must be finite, got " + std::to_string(scale));
}

// x row-major (rows, cols); weight (cols) or nullptr; sum and argmax (rows).
inline void scaled_row_sum(const float* x, int64_t rows, int64_t cols, const float* weight,
                           float scale, float* sum, int64_t* argmax) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* row = x + i * cols;
    double total = 0;  // double: the sum of many floats keeps its precision
    int64_t best = 0;
    float best_term = weight ? weight[0] * row[0] : row[0];
    for (int64_t j = 0; j < cols; ++j) {
      const float term = weight ? weight[j] * row[j] : row[j];
      total += term;
      if (term > best_term) best_term = term, best = j;  // ">" keeps the first of equal terms
    }
    sum[i] = static_cast<float>(scale * total);
    argmax[i] = best;
  }
}
