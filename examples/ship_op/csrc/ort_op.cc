// geo::sq_dist as an ONNX Runtime custom op (domain "geo"): needs only the ORT
// headers and the kernel; RegisterCustomOps is its only exported symbol.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#include <onnxruntime_lite_custom_op.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "sq_dist.h"

namespace {

Ort::Status sq_dist(const Ort::Custom::Tensor<float>& a, const Ort::Custom::Tensor<float>& b,
                    Ort::Custom::Tensor<float>& out) {
  const auto shape = a.Shape();
  if (shape.size() != 2 || b.Shape() != shape)
    return Ort::Status("geo::sq_dist: a and b must be (n, d) tensors of one shape", ORT_INVALID_ARGUMENT);
  geo::sq_dist(a.Data(), b.Data(), out.Allocate({shape[0]}), 0, shape[0], shape[1]);
  return Ort::Status{nullptr};
}

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // Ask for min(runtime, headers): the wheel runs on runtimes older than its headers.
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  const int version = std::min(runtime, ORT_API_VERSION);
  Ort::InitApi(api_base->GetApi(version));
  static const std::unique_ptr<Ort::Custom::OrtLiteCustomOp> op{
      Ort::Custom::CreateLiteCustomOp("sq_dist", "CPUExecutionProvider", sq_dist)};
  op->version = version;  // older runtimes refuse an op claiming a newer version
  static Ort::CustomOpDomain domain = [] {
    Ort::CustomOpDomain d("geo");
    d.Add(op.get());
    return d;
  }();
  try {  // an exception must not cross the C boundary into the runtime
    Ort::UnownedSessionOptions(options).Add(domain);
    return nullptr;
  } catch (const Ort::Exception& e) {
    return Ort::GetApi().CreateStatus(e.GetOrtErrorCode(), e.what());
  }
}
