// Helpers shared by the ONNX Runtime kernels in this folder: errors become an
// OrtStatus (never an exception across the C boundary), the session's
// intra-op thread pool becomes a customops::ParallelFor, and shape inference
// reads optional inputs without tripping over absent ones.
#pragma once

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../kernels/half.h"
#include "../kernels/parallel.h"
#include "../kernels/shape.h"

namespace customops::ort {

// The ops' ONNX domain (customops/ort.py DOMAIN in Python).  Kernels are
// registered without a version range, so they serve every version of it.
inline constexpr const char* kDomain = "custom";

// The kernels' element type for an ORT element type T: the same, except
// that the kernels' Half stands for Ort::Float16_t (the same 16 bits).
template <typename T> struct KernelElement { using type = T; };
template <> struct KernelElement<Ort::Float16_t> { using type = Half; };
static_assert(sizeof(Half) == sizeof(Ort::Float16_t));
template <typename T> using KernelElementT = typename KernelElement<T>::type;

// The ONNX element type of float, double and Ort::Float16_t.
template <typename T>
constexpr ONNXTensorElementDataType kOnnxType =
    std::is_same_v<T, float>    ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT
    : std::is_same_v<T, double> ? ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE
                                : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;

// Runs fn and converts any exception into an OrtStatus (nullptr = success):
// argument errors become ORT_INVALID_ARGUMENT with the kernel's message.
OrtStatusPtr guarded(const std::function<void()>& fn) noexcept;

// A ParallelFor that runs on the session's intra-op thread pool.
ParallelFor parallel_for_of(const Ort::KernelContext& context);

// Input `index` of a kernel call, or nullopt when the node leaves that
// optional input out (by omitting it or giving it an empty name).
std::optional<Ort::ConstValue> optional_input(const Ort::KernelContext& context, size_t index);

Shape shape_of(const Ort::ConstValue& value);
OptionalShape shape_of(const std::optional<Ort::ConstValue>& value);

// An int / ints attribute of a node, or nullopt when the node has none.  An
// attribute of another type (groups=2.0) is an argument error naming it, not
// a silent default.
std::optional<int64_t> int_attribute(const Ort::ConstKernelInfo& info, const char* op,
                                     const char* name);
std::optional<Shape> ints_attribute(const Ort::ConstKernelInfo& info, const char* op,
                                    const char* name);

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

namespace customops::ort {

// What the runtime needs to know about one input or output.
struct IoSpec {
  ONNXTensorElementDataType type;
  bool optional;
};

// The classic (non-lite) custom-op API, the one style of every op here.
//
// ORT's lite API marks every input and output optional and treats an
// optional input as present whenever its index is below the node's input
// count: a node that skips a middle input (mask absent, bias present), or
// gives a required input or an output the empty name, makes it read a null
// value and crash.  Here required inputs and outputs are declared required
// (ORT refuses such nodes at load), and each optional input is fetched from
// the kernel context and checked for null.
//
// Kernel provides: kName, kInputs[], kOutputs[] (IoSpec), a constructor from
// Ort::ConstKernelInfo (reads attributes), void compute(Ort::KernelContext&)
// and static void infer_shapes(const ShapeInference&).
template <typename Kernel>
struct StatusKernel {
  Kernel kernel;
  OrtStatusPtr ComputeV2(OrtKernelContext* context) {
    return guarded([&] {
      Ort::KernelContext ctx(context);
      kernel.compute(ctx);
    });
  }
};

template <typename Kernel>
struct ClassicOp : Ort::CustomOpBase<ClassicOp<Kernel>, StatusKernel<Kernel>, true> {
  ClassicOp() {
    // Set after the base constructor, which leaves shape inference empty.
    this->InferOutputShapeFn = [](const OrtCustomOp*, OrtShapeInferContext* context) {
      return guarded([&] { Kernel::infer_shapes(ShapeInference(context)); });
    };
  }
  const char* GetName() const { return Kernel::kName; }
  size_t GetInputTypeCount() const { return std::size(Kernel::kInputs); }
  ONNXTensorElementDataType GetInputType(size_t i) const { return Kernel::kInputs[i].type; }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t i) const {
    return Kernel::kInputs[i].optional ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  }
  size_t GetOutputTypeCount() const { return std::size(Kernel::kOutputs); }
  ONNXTensorElementDataType GetOutputType(size_t i) const { return Kernel::kOutputs[i].type; }
  OrtStatusPtr CreateKernelV2(const OrtApi&, const OrtKernelInfo* info, void** kernel) const {
    return guarded([&] {
      *kernel = new StatusKernel<Kernel>{Kernel(Ort::ConstKernelInfo(info))};
    });
  }
};

}  // namespace customops::ort
