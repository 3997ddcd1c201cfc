// Shape inference for the classic ops: what ORT knows of a node's inputs,
// and the types and shapes of its outputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ort_api.h"

namespace customops::ort {

// Shape inference in terms ORT's graph understands: a dimension is a number
// or a symbol ("batch"), or unknown.
struct Dim {
  int64_t value = -1;  // -1: unknown or symbolic
  std::string symbol;  // empty unless symbolic
};
using Dims = std::vector<Dim>;

// Reads the shapes of a node's inputs (nullopt for absent inputs or unknown
// rank) and sets its output types and shapes; everything it raises is turned
// into an OrtStatus by the caller's guarded().  Written against the raw
// OrtShapeInferContext rather than the lite API's ShapeInferContext, whose
// SetOutputShape encodes symbolic dimensions as -2: ORT 1.31 then drops the
// whole shape (measured: a (n, 3) input gave an output of unknown shape).
class ShapeInference {
 public:
  explicit ShapeInference(OrtShapeInferContext* context) : context_(context) {}
  std::optional<Dims> input(size_t index) const;
  // The element type of input `index` (UNDEFINED when absent or unknown).
  // An op with one kernel per type sets its output type from this: ORT runs
  // the shape inference of the first kernel registered under the name for
  // nodes of every type.
  ONNXTensorElementDataType input_type(size_t index) const;
  int64_t attribute(const char* name, int64_t fallback) const;
  void set_output(size_t index, ONNXTensorElementDataType type, const Dims& dims) const;

 private:
  OrtShapeInferContext* context_;
};

}  // namespace customops::ort
