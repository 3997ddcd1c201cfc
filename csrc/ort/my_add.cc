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

// The output has the shape of a.  Written against the raw context rather
// than the lite API's ShapeInferContext::SetOutputShape, which encodes
// symbolic dimensions as -2: ORT 1.31 then drops the whole shape (measured:
// a (n, 3) input gave an output of unknown shape).
OrtStatusPtr infer_shapes(const OrtCustomOp*, OrtShapeInferContext* context) {
  return guarded([&] {
    const ShapeInference shapes(context);
    if (const auto a = shapes.input(0)) shapes.set_output(0, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, *a);
  });
}

std::unique_ptr<Ort::Custom::OrtLiteCustomOp> make_op() {
  std::unique_ptr<Ort::Custom::OrtLiteCustomOp> op{
      Ort::Custom::CreateLiteCustomOp("my_add", "CPUExecutionProvider", compute)};
  op->InferOutputShapeFn = infer_shapes;
  return op;
}

}  // namespace

OrtCustomOp* my_add_op() {
  static const std::unique_ptr<Ort::Custom::OrtLiteCustomOp> op = make_op();
  return op.get();
}

}  // namespace customops::ort
