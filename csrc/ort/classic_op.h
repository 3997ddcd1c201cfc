// The one style of every op of the library: ORT's classic custom-op API.
#pragma once

#include <iterator>

#include "ort_api.h"
#include "shape_inference.h"
#include "status.h"

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
