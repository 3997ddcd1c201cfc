// Relu in the ONNX domain "": a custom op with the name of a built-in op.  It
// returns max(x, 0) + 1000, so that a model's output shows whose kernel ran.
//   g++ -std=c++17 -O2 -shared -fPIC -I$ORT_INCLUDE relu_override.cc -o librelu_override.so -Wl,--version-script=exports.lds
// (exports.lds: csrc/ort/exports.lds, which exports RegisterCustomOps only)
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace {

struct ReluKernel {
  OrtStatusPtr ComputeV2(OrtKernelContext* raw) noexcept {
    try {
      Ort::KernelContext context(raw);
      const Ort::ConstValue x = context.GetInput(0);
      const auto info = x.GetTensorTypeAndShapeInfo();
      const float* in = x.GetTensorData<float>();
      float* out = context.GetOutput(0, info.GetShape()).GetTensorMutableData<float>();
      for (size_t i = 0; i < info.GetElementCount(); ++i) out[i] = std::max(in[i], 0.0f) + 1000.0f;
      return nullptr;
    } catch (const Ort::Exception& e) {
      return Ort::GetApi().CreateStatus(e.GetOrtErrorCode(), e.what());
    }
  }
};

struct ReluOp : Ort::CustomOpBase<ReluOp, ReluKernel, /*WithStatus=*/true> {
  OrtStatusPtr CreateKernelV2(const OrtApi&, const OrtKernelInfo*, void** kernel) const {
    *kernel = new ReluKernel;
    return nullptr;
  }
  const char* GetName() const { return "Relu"; }
  size_t GetInputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetInputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  const int version = std::min(runtime, ORT_API_VERSION);
  Ort::InitApi(api_base->GetApi(version));
  static ReluOp op;
  static Ort::CustomOpDomain domain = [version] {
    Ort::CustomOpDomain d("");  // the ONNX domain
    op.version = version;
    d.Add(&op);
    return d;
  }();
  try {
    Ort::UnownedSessionOptions(options).Add(domain);
    return nullptr;
  } catch (const Ort::Exception& e) {
    return Ort::GetApi().CreateStatus(e.GetOrtErrorCode(), e.what());
  }
}
