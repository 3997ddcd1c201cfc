// The library's single exported symbol.  onnxruntime calls it when a session
// loads this file (SessionOptions.register_custom_ops_library).
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>

#include "ops.h"

namespace customops::ort {
namespace {

// The oldest runtime this library works with, measured:
// - the C++ wrappers call OrtApi functions up to 1.23 (GetTensorData); on an
//   older runtime they would call past the end of its shorter OrtApi
//   (1.20 read null data, 1.17 crashed);
// - 1.23 crashes in shape inference when a node skips a middle optional
//   input (deform_conv2d with bias but no mask); 1.24 does not.
constexpr int kMinApiVersion = 24;

// ORT's API version is its minor version ("1.31.1" -> 31).
int runtime_api_version(const OrtApiBase* base) {
  const std::string version = base->GetVersionString();
  const size_t dot = version.find('.');
  return dot == std::string::npos ? 0 : std::atoi(version.c_str() + dot + 1);
}

// One domain for the process, shared by every session that loads the
// library.  It is never freed: sessions may outlive any static destructor.
OrtCustomOpDomain* domain(int api_version) {
  static OrtCustomOpDomain* shared = [api_version] {
    Ort::CustomOpDomain d(kDomain);
    std::vector<OrtCustomOp*> ops{my_add_op(), knn_query_op()};
    for (OrtCustomOp* op : deform_conv2d_ops()) ops.push_back(op);
    for (OrtCustomOp* op : ops) {
      // The op structs claim the headers' API version; a runtime older than
      // that refuses them ("Unsupported version '29' in custom op", measured
      // with onnxruntime 1.17-1.23).  Claim the version we negotiated.
      op->version = api_version;
      d.Add(op);
    }
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
    const std::string message = "customops needs onnxruntime >= 1.24, this is " +
                                std::string(api_base->GetVersionString());
    return api_base->GetApi(1)->CreateStatus(ORT_FAIL, message.c_str());  // v1 always exists
  }
  // Ask for the runtime's own API version, capped at the headers' one, so the
  // library also loads into runtimes older than the headers.
  const int version = std::min(runtime, ORT_API_VERSION);
  const OrtApi* api = api_base->GetApi(version);
  static std::once_flag init;
  std::call_once(init, [api] { Ort::InitApi(api); });
  return guarded([&] { Ort::UnownedSessionOptions(options).Add(domain(version)); });
}
