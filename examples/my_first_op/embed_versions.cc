// Two kernels of one op, my_ops::which, for two versions of the domain my_ops,
// with the lite API's start and end versions.  Each kernel answers its own
// version, so a model shows which kernel ORT picked:
//   g++ -std=c++17 -O2 -shared -fPIC -I$ORT_INCLUDE embed_versions.cc -o libembed_versions.so -Wl,--version-script=exports.lds
// (csrc/ort/exports.lds: RegisterCustomOps is the one symbol the library exports)
// -DNEWEST_FIRST adds the version-2 kernel first; -DCLAIMED_API=99 sets the ops'
// `version` field (the OrtCustomOp layout they claim) to 99.
#define ORT_API_MANUAL_INIT  // the runtime hands us its API in RegisterCustomOps
#include <onnxruntime_cxx_api.h>
#include <onnxruntime_lite_custom_op.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace {

using Ort::Custom::Tensor;

void which_v1(const Tensor<float>&, Tensor<float>& out) { out.Allocate({1})[0] = 1; }
void which_v2(const Tensor<float>&, Tensor<float>& out) { out.Allocate({1})[0] = 2; }

// The lite API marks every input and output optional: x and out are required
// (embed_lite.cc says why).
OrtCustomOpInputOutputCharacteristic required(const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; }

}  // namespace

extern "C" ORT_EXPORT OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  Ort::InitApi(api_base->GetApi(std::min(runtime, ORT_API_VERSION)));

  using Op = std::unique_ptr<Ort::Custom::OrtLiteCustomOp>;
  //                                    name, provider, kernel, shape fn, start, end version
  static Op v1{Ort::Custom::CreateLiteCustomOp("which", "CPUExecutionProvider", which_v1, {}, 1, 1)};
  static Op v2{Ort::Custom::CreateLiteCustomOp("which", "CPUExecutionProvider", which_v2, {}, 2, 2)};
  static Ort::CustomOpDomain domain = [] {
    Ort::CustomOpDomain d("my_ops");
#ifdef NEWEST_FIRST
    for (const Op* op : {&v2, &v1}) {
#else
    for (const Op* op : {&v1, &v2}) {
#endif
#ifdef CLAIMED_API
      (*op)->version = CLAIMED_API;  // instead of ORT_API_VERSION, as CreateLiteCustomOp sets it
#endif
      (*op)->GetInputCharacteristic = (*op)->GetOutputCharacteristic = required;
      d.Add(op->get());
    }
    return d;
  }();
  Ort::UnownedSessionOptions(options).Add(domain);
  return nullptr;
}
