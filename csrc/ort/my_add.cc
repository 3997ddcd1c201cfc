// custom::my_add on ONNX Runtime's CPU provider, for float, double and
// float16 tensors: one kernel per type under the one op name, and ORT picks
// the kernel whose declared types match the node's.
//
// Written, like every op of the library, as a ClassicOp with required inputs
// and output: ORT then refuses at load a node that leaves one of them out (an
// empty name).  The lite API, taught in examples/my_first_op, marks every
// input and output optional, so such a node loaded and the kernel read a
// null value (a segfault, measured on onnxruntime 1.31.1).
#include "ops.h"
#include "../kernels/my_add.h"

namespace customops::ort {
namespace {

template <typename T>
struct MyAdd {
  static constexpr const char* kName = "my_add";
  static constexpr ONNXTensorElementDataType kType = kOnnxType<T>;
  // a, b
  static constexpr IoSpec kInputs[] = {{kType, false}, {kType, false}};
  static constexpr IoSpec kOutputs[] = {{kType, false}};

  explicit MyAdd(const Ort::ConstKernelInfo&) {}

  void compute(Ort::KernelContext& context) const {
    const Ort::ConstValue a = context.GetInput(0), b = context.GetInput(1);
    const Shape shape = shape_of(a);
    my_add_check(shape, shape_of(b));
    auto out = context.GetOutput(0, shape);
    using Kernel = KernelElementT<T>;
    my_add(reinterpret_cast<const Kernel*>(a.GetTensorData<T>()),
           reinterpret_cast<const Kernel*>(b.GetTensorData<T>()),
           a.GetTensorTypeAndShapeInfo().GetElementCount(),
           reinterpret_cast<Kernel*>(out.GetTensorMutableData<T>()), parallel_for_of(context));
  }

  // The output has the shape and type of a (see ShapeInference::input_type).
  static void infer_shapes(const ShapeInference& shapes) {
    if (const auto a = shapes.input(0)) shapes.set_output(0, shapes.input_type(0), *a);
  }
};

}  // namespace

std::vector<OrtCustomOp*> my_add_ops() {
  static ClassicOp<MyAdd<float>> f32;
  static ClassicOp<MyAdd<double>> f64;
  static ClassicOp<MyAdd<Ort::Float16_t>> f16;
  return {&f32, &f64, &f16};
}

}  // namespace customops::ort
