// custom::my_add on ONNX Runtime's CPU provider, written with the lite API:
// the argument list of the compute function is the op's signature.
#include "ops.h"
#include "../kernels/my_add.h"

namespace customops::ort {
namespace {

Ort::Status compute(OrtKernelContext* context, const Ort::Custom::Tensor<float>& a,
                    const Ort::Custom::Tensor<float>& b, Ort::Custom::Tensor<float>& out) {
  return Ort::Status(guarded([&] {
    my_add_check(a.Shape(), b.Shape());
    float* result = out.Allocate(a.Shape());
    my_add(a.Data(), b.Data(), a.NumberOfElement(), result,
           parallel_for_of(Ort::KernelContext(context)));
  }));
}

// The output has the shape of a.
Ort::Status infer_shapes(Ort::ShapeInferContext& context) {
  return context.SetOutputShape(0, context.GetInputShape(0));
}

}  // namespace

const OrtCustomOp* my_add_op() {
  static const std::unique_ptr<Ort::Custom::OrtLiteCustomOp> op{
      Ort::Custom::CreateLiteCustomOp("my_add", "CPUExecutionProvider", compute, infer_shapes)};
  return op.get();
}

}  // namespace customops::ort
