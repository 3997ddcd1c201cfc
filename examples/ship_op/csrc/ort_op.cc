// geo::sq_dist as an ONNX Runtime custom op (domain "geo"): needs only the ORT
// headers and the kernel; RegisterCustomOps is its only exported symbol.
//
// Written on the classic API (Ort::CustomOpBase), not the lite API: the lite API
// marks every input optional, so ORT accepts a node whose input is named "" and
// the kernel reads a null value (a segfault).  Here both inputs are required:
// ORT refuses such a node when the session is created.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "sq_dist.h"

namespace {

struct Kernel {
  OrtStatusPtr ComputeV2(OrtKernelContext* raw) noexcept {
    try {
      Ort::KernelContext context(raw);
      const Ort::ConstValue a = context.GetInput(0), b = context.GetInput(1);
      const std::vector<int64_t> shape = a.GetTensorTypeAndShapeInfo().GetShape();
      if (shape.size() != 2 || b.GetTensorTypeAndShapeInfo().GetShape() != shape)
        return Ort::GetApi().CreateStatus(ORT_INVALID_ARGUMENT,
                                          "geo::sq_dist: a and b must be (n, d) tensors of one shape");
      const int64_t n = shape[0];
      float* out = context.GetOutput(0, &n, 1).GetTensorMutableData<float>();
      geo::sq_dist(a.GetTensorData<float>(), b.GetTensorData<float>(), out, 0, n, shape[1]);
      return nullptr;
    } catch (const Ort::Exception& e) {  // the wrappers report ORT's errors this way
      return Ort::GetApi().CreateStatus(e.GetOrtErrorCode(), e.what());
    } catch (const std::bad_alloc&) {
      return Ort::GetApi().CreateStatus(ORT_FAIL, "geo::sq_dist: out of memory");
    }
  }
};

// out is (n): a's first dimension, a number or a symbol ("batch") as the graph
// has it.  The raw C function keeps a symbol; the Ort::ShapeInferContext
// wrapper cannot write one and the output would get no shape.
OrtStatusPtr infer_shape(const OrtCustomOp*, OrtShapeInferContext* context) noexcept {
  try {
    OrtTensorTypeAndShapeInfo* a_info = nullptr;  // the context's: read it, never free it
    Ort::ThrowOnError(Ort::GetApi().ShapeInferContext_GetInputTypeShape(context, 0, &a_info));
    const Ort::ConstTensorTypeAndShapeInfo a(a_info);
    std::vector<int64_t> dims{-1};
    std::vector<std::string> names{""};
    if (a.GetDimensionsCount() == 2) {  // otherwise Compute says why
      dims[0] = a.GetShape()[0];
      names[0] = a.GetSymbolicDimensions()[0];
    }
    const Ort::TensorTypeAndShapeInfo out(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, dims, &names);
    Ort::ThrowOnError(Ort::GetApi().ShapeInferContext_SetOutputTypeShape(context, 0, out));
    return nullptr;
  } catch (const Ort::Exception& e) {
    return Ort::GetApi().CreateStatus(e.GetOrtErrorCode(), e.what());
  }
}

struct SqDist : Ort::CustomOpBase<SqDist, Kernel, /*WithStatus=*/true> {
  SqDist() { InferOutputShapeFn = infer_shape; }
  OrtStatusPtr CreateKernelV2(const OrtApi&, const OrtKernelInfo*, void** kernel) const noexcept {
    *kernel = new (std::nothrow) Kernel;
    return *kernel ? nullptr : Ort::GetApi().CreateStatus(ORT_FAIL, "geo::sq_dist: out of memory");
  }
  const char* GetName() const { return "sq_dist"; }
  const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }
  size_t GetInputTypeCount() const { return 2; }
  ONNXTensorElementDataType GetInputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // Ask for min(runtime, headers): the wheel runs on runtimes older than its headers.
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  const int version = std::min(runtime, ORT_API_VERSION);
  Ort::InitApi(api_base->GetApi(version));
  static SqDist op;
  op.version = version;  // older runtimes refuse an op claiming a newer version
  static Ort::CustomOpDomain domain = [] {
    Ort::CustomOpDomain d("geo");
    d.Add(&op);
    return d;
  }();
  try {  // an exception must not cross the C boundary into the runtime
    Ort::UnownedSessionOptions(options).Add(domain);
    return nullptr;
  } catch (const Ort::Exception& e) {
    return Ort::GetApi().CreateStatus(e.GetOrtErrorCode(), e.what());
  }
}
