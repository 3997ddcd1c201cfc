// custom::my_add on ONNX Runtime's CPU provider, written with the lite API:
// the argument list of the compute function is the op's signature.  One
// kernel per element type (float, double, float16) under the one name; ORT
// picks the kernel whose types match the node's.
#include "ops.h"
#include "../kernels/my_add.h"

namespace customops::ort {
namespace {

template <typename T>
Ort::Status compute(OrtKernelContext* context, const Ort::Custom::Tensor<T>& a,
                    const Ort::Custom::Tensor<T>& b, Ort::Custom::Tensor<T>& out) {
  using Kernel = KernelElementT<T>;
  return Ort::Status(guarded([&] {
    my_add_check(a.Shape(), b.Shape());
    T* result = out.Allocate(a.Shape());
    my_add(reinterpret_cast<const Kernel*>(a.Data()), reinterpret_cast<const Kernel*>(b.Data()),
           a.NumberOfElement(), reinterpret_cast<Kernel*>(result),
           parallel_for_of(Ort::KernelContext(context)));
  }));
}

// The output has the shape and type of a.  ORT runs the shape function of
// the first kernel registered under a name for every node of that name, so
// the type comes from the node, not from T.  Written against the raw
// context rather than the lite API's ShapeInferContext::SetOutputShape, which
// encodes symbolic dimensions as -2: ORT 1.31 then drops the whole shape
// (measured: a (n, 3) input gave an output of unknown shape).
OrtStatusPtr infer_shapes(const OrtCustomOp*, OrtShapeInferContext* context) {
  return guarded([&] {
    const ShapeInference shapes(context);
    if (const auto a = shapes.input(0)) shapes.set_output(0, shapes.input_type(0), *a);
  });
}

template <typename T>
OrtCustomOp* op() {
  static const std::unique_ptr<Ort::Custom::OrtLiteCustomOp> op = [] {
    std::unique_ptr<Ort::Custom::OrtLiteCustomOp> made{
        Ort::Custom::CreateLiteCustomOp("my_add", "CPUExecutionProvider", compute<T>)};
    made->InferOutputShapeFn = infer_shapes;
    return made;
  }();
  return op.get();
}

}  // namespace

std::vector<OrtCustomOp*> my_add_ops() { return {op<float>(), op<double>(), op<Ort::Float16_t>()}; }

}  // namespace customops::ort
