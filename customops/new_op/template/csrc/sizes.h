// The inputs' shapes checked against the schema's --shapes, in one place that
// both bindings call: the rank, each static size, and each named size equal
// wherever it appears.  Generated from the schema; the math is in the op's header.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

// The named sizes read from the inputs ("rows" -> 3).
using Sizes = std::map<std::string, int64_t>;

// One declared dimension: a static size, or a name bound at its first use.
struct Dim {
  Dim(int64_t size) : size(size) {}
  Dim(const char* name) : name(name) {}
  int64_t size = -1;
  std::string name;
};

inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

inline std::string dims_text(std::initializer_list<Dim> dims) {
  std::string text = "(";
  size_t i = 0;
  for (const Dim& dim : dims) text += (i++ ? ", " : "") + (dim.name.empty() ? std::to_string(dim.size) : dim.name);
  return text + (dims.size() == 1 ? ",)" : ")");
}

// Throws std::invalid_argument naming the input, what was declared and what came.
inline void match_shape(const char* op, const char* input, const std::vector<int64_t>& shape,
                        std::initializer_list<Dim> dims, Sizes& sizes) {
  const std::string expected = std::string(op) + ": " + input + " must have shape " + dims_text(dims);
  if (shape.size() != dims.size())
    throw std::invalid_argument(expected + ", got " + shape_text(shape));
  size_t axis = 0;
  for (const Dim& dim : dims) {
    const int64_t got = shape[axis++];
    if (dim.name.empty()) {
      if (got != dim.size) throw std::invalid_argument(expected + ", got " + shape_text(shape));
    } else if (const auto bound = sizes.find(dim.name); bound == sizes.end()) {
      sizes[dim.name] = got;
    } else if (bound->second != got) {
      throw std::invalid_argument(expected + " with " + dim.name + " = " + std::to_string(bound->second) +
                                  " as in the inputs before it, got " + shape_text(shape));
    }
  }
}

// A size the op's rule computed from the data, before it allocates with it.
inline int64_t checked_size(const char* op, const char* name, int64_t size) {
  if (size < 0) throw std::logic_error(std::string(op) + ": the size " + name + " came out negative: " + std::to_string(size));
  return size;
}

// <schema:sizes>
// The sizes of my_ops::scaled_row_sum's inputs: x (rows, cols); weight (cols).
inline Sizes scaled_row_sum_sizes(const std::vector<int64_t>& x,
    const std::optional<std::vector<int64_t>>& weight) {
  Sizes sizes;
  match_shape("scaled_row_sum", "x", x, {{"rows"}, {"cols"}}, sizes);
  if (weight) match_shape("scaled_row_sum", "weight", *weight, {{"cols"}}, sizes);
  return sizes;
}
// </schema:sizes>
