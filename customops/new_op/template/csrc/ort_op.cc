// my_ops::scaled_row_sum for ONNX Runtime, with the classic API
// (Ort::CustomOpBase), in a library of its own.  ORT finds one symbol in it,
// RegisterCustomOps (ort_op.lds hides the rest).
//   inputs  x float (rows, cols), required; weight float (cols), optional
//   outputs sum float (rows), argmax int64 (rows)
//   attribute scale: float, read once when ORT creates the kernel
#define ORT_API_MANUAL_INIT  // the runtime hands us its API in RegisterCustomOps
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "scaled_row_sum.h"

namespace {

const OrtApi& api() { return Ort::GetApi(); }

// An exception must never cross into ORT: every entry point below turns it
// into a status, whose text ORT passes on to the caller.
OrtStatusPtr as_status(const std::exception_ptr& error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const Ort::Exception& e) {
    return api().CreateStatus(e.GetOrtErrorCode(), e.what());
  } catch (const std::invalid_argument& e) {
    return api().CreateStatus(ORT_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return api().CreateStatus(ORT_FAIL, e.what());
  }
}

struct ScaledRowSumKernel {
  float scale;

  OrtStatusPtr ComputeV2(OrtKernelContext* raw) noexcept {
    try {
      Ort::KernelContext context(raw);
      const Ort::ConstValue x = context.GetInput(0);
      const std::vector<int64_t> shape = x.GetTensorTypeAndShapeInfo().GetShape();
      if (shape.size() != 2)
        throw std::invalid_argument("scaled_row_sum: x must have shape (rows, cols), got rank " +
                                    std::to_string(shape.size()));
      const Ort::ConstValue weight = optional_input(context, 1);
      const bool has_weight = static_cast<const OrtValue*>(weight) != nullptr;
      const int64_t weight_size =
          has_weight ? static_cast<int64_t>(weight.GetTensorTypeAndShapeInfo().GetElementCount()) : 0;
      check_scaled_row_sum(shape[1], has_weight, weight_size, scale);

      float* sum = context.GetOutput(0, {shape[0]}).GetTensorMutableData<float>();
      int64_t* argmax = context.GetOutput(1, {shape[0]}).GetTensorMutableData<int64_t>();
      scaled_row_sum(x.GetTensorData<float>(), shape[0], shape[1],
                     has_weight ? weight.GetTensorData<float>() : nullptr, scale, sum, argmax);
      return nullptr;
    } catch (...) {
      return as_status(std::current_exception());
    }
  }

  // An optional input is absent when the node has fewer inputs or names it
  // "": then the context holds a null value, which we must check ourselves.
  static Ort::ConstValue optional_input(Ort::KernelContext& context, size_t index) {
    if (index >= context.GetInputCount()) return Ort::ConstValue(nullptr);
    return context.GetInput(index);
  }
};

// sum and argmax: (rows,), rows as the graph has x's first dimension, a
// number or a symbol.  Declaring it -1 without its name would replace the
// model's symbol ("batch") with an anonymous dimension.
OrtStatusPtr infer_shape(const OrtCustomOp*, OrtShapeInferContext* context) noexcept {
  try {
    OrtTensorTypeAndShapeInfo* raw = nullptr;  // owned by the context: read it, never free it
    Ort::ThrowOnError(api().ShapeInferContext_GetInputTypeShape(context, 0, &raw));
    const Ort::ConstTensorTypeAndShapeInfo x(raw);
    int64_t rows = -1;
    std::string rows_name;
    if (x.GetDimensionsCount() == 2) {
      rows = x.GetShape()[0];
      rows_name = x.GetSymbolicDimensions()[0];
    }
    const std::vector<std::string> names{rows_name};
    const Ort::TensorTypeAndShapeInfo sum(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, {rows}, &names);
    const Ort::TensorTypeAndShapeInfo argmax(ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, {rows}, &names);
    Ort::ThrowOnError(api().ShapeInferContext_SetOutputTypeShape(context, 0, sum));
    Ort::ThrowOnError(api().ShapeInferContext_SetOutputTypeShape(context, 1, argmax));
    return nullptr;
  } catch (...) {
    return as_status(std::current_exception());
  }
}

struct ScaledRowSumOp : Ort::CustomOpBase<ScaledRowSumOp, ScaledRowSumKernel, /*WithStatus=*/true> {
  ScaledRowSumOp() { InferOutputShapeFn = infer_shape; }
  const char* GetName() const { return "scaled_row_sum"; }

  size_t GetInputTypeCount() const { return 2; }
  ONNXTensorElementDataType GetInputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
  // Declared optional, ORT accepts a node without weight and hands the kernel
  // a null value; declared required, it refuses such a model at load.
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t index) const {
    return index == 0 ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
  }

  size_t GetOutputTypeCount() const { return 2; }
  ONNXTensorElementDataType GetOutputType(size_t index) const {
    return index == 0 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  }
  OrtCustomOpInputOutputCharacteristic GetOutputCharacteristic(size_t) const {
    return INPUT_OUTPUT_REQUIRED;
  }

  // Once per node, at session creation: a bad attribute fails the session,
  // not every run.  ORT reports this status as "Exception during
  // initialization: <text>", dropping its code, so the text says it all.
  OrtStatusPtr CreateKernelV2(const OrtApi&, const OrtKernelInfo* info, void** kernel) const noexcept {
    try {
      float scale = 0;
      const Ort::Status read(api().KernelInfoGetAttribute_float(info, "scale", &scale));
      if (!read.IsOK())
        throw std::invalid_argument("scaled_row_sum: attribute scale (a FLOAT) is missing or not a "
                                    "float: " + read.GetErrorMessage());
      if (!std::isfinite(scale))
        throw std::invalid_argument("scaled_row_sum: scale must be finite, got " + std::to_string(scale));
      *kernel = new ScaledRowSumKernel{scale};
      return nullptr;
    } catch (...) {
      return as_status(std::current_exception());
    }
  }
};

}  // namespace

extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // Ask the runtime for min(its API version, the headers'): "1.31.1" -> 31.
  // The headers' own ORT_API_VERSION would get NULL from an older runtime.
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  const int version = std::min(runtime, ORT_API_VERSION);
  Ort::InitApi(api_base->GetApi(version));

  static ScaledRowSumOp op;  // the op and its domain outlive every session
  static Ort::CustomOpDomain domain = [version] {
    Ort::CustomOpDomain d("my_ops");
    op.version = version;  // the op's API version; older runtimes refuse a newer one
    d.Add(&op);
    return d;
  }();
  try {
    Ort::UnownedSessionOptions(options).Add(domain);
    return nullptr;
  } catch (...) {
    return as_status(std::current_exception());
  }
}
