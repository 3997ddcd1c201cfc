// The library's single exported symbol.  onnxruntime calls it when a session
// loads this file (SessionOptions.register_custom_ops_library).
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>

#include "ops.h"

namespace customops::ort {
namespace {

// Needs KernelContext_ParallelFor, KernelComputeV2 and InferOutputShapeFn.
constexpr int kMinApiVersion = 17;

// ORT's API version is its minor version ("1.31.1" -> 31).
int runtime_api_version(const OrtApiBase* base) {
  const std::string version = base->GetVersionString();
  const size_t dot = version.find('.');
  return dot == std::string::npos ? 0 : std::atoi(version.c_str() + dot + 1);
}

// One domain for the process, shared by every session that loads the
// library.  It is never freed: sessions may outlive any static destructor.
OrtCustomOpDomain* domain() {
  static OrtCustomOpDomain* shared = [] {
    Ort::CustomOpDomain d(kDomain);
    d.Add(my_add_op());
    d.Add(knn_query_op());
    d.Add(deform_conv2d_op());
    return d.release();
  }();
  return shared;
}

}  // namespace
}  // namespace customops::ort

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  using namespace customops::ort;
  const int runtime = runtime_api_version(api_base);
  if (runtime < kMinApiVersion) {
    const std::string message = "customops needs onnxruntime >= 1.17, this is " +
                                std::string(api_base->GetVersionString());
    return api_base->GetApi(1)->CreateStatus(ORT_FAIL, message.c_str());  // v1 always exists
  }
  // Ask for the runtime's own API version, capped at the headers' one, so the
  // library also loads into runtimes older than the headers.
  const OrtApi* api = api_base->GetApi(std::min(runtime, ORT_API_VERSION));
  static std::once_flag init;
  std::call_once(init, [api] { Ort::InitApi(api); });
  return guarded([options] { Ort::UnownedSessionOptions(options).Add(domain()); });
}
