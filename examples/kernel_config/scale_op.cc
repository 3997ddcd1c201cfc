// my_ops::scale(x float[...]) -> y float[...] = x * factor, where the factor
// comes from the session's configuration ("my_ops.factor", default 1), read
// twice: by RegisterCustomOps (GetSessionConfigEntry on the options it is
// given) and by each kernel when it is created (KernelInfo_GetConfigEntries).
// The kernel logs through the session's logger (KernelInfo_GetLogger,
// Logger_LogMessage) and declares that y may reuse x's buffer (GetMayInplace).
//   g++ -std=c++17 -O2 -shared -fPIC -I$ORT_INCLUDE scale_op.cc -o libscale.so -Wl,--version-script=exports.lds
// (exports.lds: csrc/ort/exports.lds, which exports RegisterCustomOps only)
// -DNO_INPLACE leaves GetMayInplace unset, for comparison.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

namespace {

const OrtApi& api() { return Ort::GetApi(); }
std::string factor_at_registration = "unset";  // what the last RegisterCustomOps saw

// One line to the session's log, at the given severity (shown when the session's
// log_severity_level lets it through).  A line that cannot be logged is dropped:
// the Ort::Status releases the error, which is never the kernel's.
void log(const OrtLogger* logger, OrtLoggingLevel level, const std::string& text) {
  Ort::Status(api().Logger_LogMessage(logger, level, text.c_str(), ORT_FILE, __LINE__, __func__));
}

struct ScaleKernel {
  float factor = 1.0f;
  const OrtLogger* logger = nullptr;  // owned by the session, valid as long as the kernel

  OrtStatusPtr ComputeV2(OrtKernelContext* raw) noexcept {
    try {
      Ort::KernelContext context(raw);
      const Ort::ConstValue x = context.GetInput(0);
      const auto info = x.GetTensorTypeAndShapeInfo();
      const float* in = x.GetTensorData<float>();
      float* out = context.GetOutput(0, info.GetShape()).GetTensorMutableData<float>();
      const size_t n = info.GetElementCount();
      for (size_t i = 0; i < n; ++i) out[i] = in[i] * factor;  // safe when out == in
      log(logger, ORT_LOGGING_LEVEL_VERBOSE, out == in ? "scale: y reuses x's buffer" : "scale: y has a buffer of its own");
      return nullptr;
    } catch (const Ort::Exception& e) {
      return api().CreateStatus(e.GetOrtErrorCode(), e.what());
    }
  }
};

struct ScaleOp : Ort::CustomOpBase<ScaleOp, ScaleKernel, /*WithStatus=*/true> {
  ScaleOp() {
#ifndef NO_INPLACE
    // Output 0 may reuse input 0's buffer.  ORT frees the two arrays with ReleaseMayInplace.
    OrtCustomOp::GetMayInplace = [](int** inputs, int** outputs) -> size_t {
      *inputs = new int[1]{0};
      *outputs = new int[1]{0};
      return 1;
    };
    OrtCustomOp::ReleaseMayInplace = [](int* inputs, int* outputs) {
      delete[] inputs;
      delete[] outputs;
    };
#endif
  }

  OrtStatusPtr CreateKernelV2(const OrtApi&, const OrtKernelInfo* raw, void** kernel) const {
    try {
      Ort::ConstKernelInfo info(raw);
      auto made = std::make_unique<ScaleKernel>();
      Ort::ThrowOnError(api().KernelInfo_GetLogger(raw, &made->logger));
      // KernelInfo_GetConfigEntries: every "key" -> "value" of the session's configuration
      const char* value = info.GetConfigEntries().GetValue("my_ops.factor");
      if (value) made->factor = std::strtof(value, nullptr);
      log(made->logger, ORT_LOGGING_LEVEL_WARNING,
          "scale: factor " + std::string(value ? value : "unset") + " at kernel creation, " +
              factor_at_registration + " at registration");
      *kernel = made.release();
      return nullptr;
    } catch (const Ort::Exception& e) {
      return api().CreateStatus(e.GetOrtErrorCode(), e.what());
    }
  }
  // y has x's shape: ORT reuses a buffer only for an output whose size it knows.
  static Ort::Status InferOutputShape(Ort::ShapeInferContext& context) {
    return context.SetOutputShape(0, context.GetInputShape(0));
  }
  const char* GetName() const { return "scale"; }
  size_t GetInputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetInputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // API version negotiation as in notebook 07; KernelInfo_GetConfigEntries needs 24 (ORT 1.24).
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  const int version = std::min(runtime, ORT_API_VERSION);
  if (version < 24) return api_base->GetApi(version)->CreateStatus(ORT_FAIL, "scale needs ONNX Runtime 1.24 or newer");
  Ort::InitApi(api_base->GetApi(version));
  try {
    // GetSessionConfigEntry: the options as they are now, when the library is registered
    Ort::UnownedSessionOptions session_options(options);
    if (session_options.HasConfigEntry("my_ops.factor"))
      factor_at_registration = session_options.GetConfigEntry("my_ops.factor");
    static ScaleOp op;  // the op and its domain outlive every session
    static Ort::CustomOpDomain domain = [version] {
      Ort::CustomOpDomain d("my_ops");
      op.version = version;  // >= 18, or ORT ignores GetMayInplace
      d.Add(&op);
      return d;
    }();
    session_options.Add(domain);
    return nullptr;
  } catch (const Ort::Exception& e) {
    return api().CreateStatus(e.GetOrtErrorCode(), e.what());
  }
}
