// my_ops::embed, embed_scaled and embed_affine, ONNX Runtime custom ops written
// with the lite API, in one file that needs only the ORT headers:
//   g++ -std=c++17 -O2 -shared -fPIC -I$ORT_INCLUDE embed_lite.cc -o libembed_lite.so -Wl,--version-script=exports.lds
// (csrc/ort/exports.lds: RegisterCustomOps is the one symbol the library exports)
//
//   embed(ids int64[...], table float[rows, width]) -> float[..., width] = table[ids]
//   embed_scaled: the same times the float attribute `scale` (default 1)
//   embed_affine(ids, table, scale?, bias?) = table[ids] * scale + bias
// The runtime hands us its API in RegisterCustomOps (Ort::InitApi, declared only
// with this macro); without it the wrappers would call OrtGetApiBase, a symbol of
// libonnxruntime that this library does not link.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#include <onnxruntime_lite_custom_op.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

using Ort::Custom::Tensor;
using OptionalTensor = std::optional<const Tensor<float>*>;

namespace {

// out[i, :] = table[ids[i], :] * factor * scale[:] + bias[:]; scale, bias may be null.
Ort::Status gather(const Tensor<int64_t>& ids, const Tensor<float>& table, float factor,
                   const float* scale, const float* bias, Tensor<float>& out) {
  if (table.Shape().size() != 2)
    return Ort::Status("embed: table must be 2-D (rows, width)", ORT_INVALID_ARGUMENT);
  const int64_t rows = table.Shape()[0], width = table.Shape()[1];
  std::vector<int64_t> shape = ids.Shape();
  shape.push_back(width);
  float* y = out.Allocate(shape);
  for (int64_t i = 0; i < ids.NumberOfElement(); ++i) {
    const int64_t id = ids.Data()[i];
    if (id < 0 || id >= rows) {
      const std::string message = "embed: id " + std::to_string(id) + " is not a row of the " +
                                  std::to_string(rows) + "-row table";
      return Ort::Status(message.c_str(), ORT_INVALID_ARGUMENT);
    }
    for (int64_t j = 0; j < width; ++j)
      y[i * width + j] = table.Data()[id * width + j] * factor * (scale ? scale[j] : 1.0f) +
                         (bias ? bias[j] : 0.0f);
  }
  return Ort::Status{nullptr};  // success
}

// A function kernel: its parameters are the op's inputs, then its outputs.
Ort::Status embed(const Tensor<int64_t>& ids, const Tensor<float>& table, Tensor<float>& out) {
  return gather(ids, table, 1.0f, nullptr, nullptr, out);
}

// embed's output shape, declared before anything runs: ids' dims, then the
// table's width.  Through the Ort::ShapeInferContext wrapper a symbolic dim is
// written as -2, which onnxruntime 1.32.0 rejects, dropping the status: with a
// symbol in the result the output gets no shape at all.  embed_classic.cc's raw
// OrtShapeInferContext function keeps symbols.
Ort::Status embed_shape(Ort::ShapeInferContext& context) {
  if (context.GetInputShape(1).size() != 2) return Ort::Status{nullptr};  // Compute says why
  Ort::ShapeInferContext::Shape out = context.GetInputShape(0);
  out.push_back(context.GetInputShape(1)[1]);
  return context.SetOutputShape(0, out);
}

// A struct kernel: built once per node, so it can read the node's attributes.
struct EmbedScaled {
  EmbedScaled(const OrtApi* api, const OrtKernelInfo* info) {
    // The C API answers with a status, so an absent attribute is no error here.
    Ort::Status status{api->KernelInfoGetAttribute_float(info, "scale", &scale)};
    if (!status.IsOK()) scale = 1.0f;  // attribute absent
    // An exception thrown here fails session creation with its message
    // ("Exception during initialization: ...", onnxruntime 1.32.0).
    if (!std::isfinite(scale)) throw std::invalid_argument("embed_scaled: scale must be finite");
  }
  Ort::Status Compute(const Tensor<int64_t>& ids, const Tensor<float>& table, Tensor<float>& out) {
    return gather(ids, table, scale, nullptr, nullptr, out);
  }
  float scale = 1.0f;
};

// Optional inputs in the lite API: std::optional parameters.  The header reads
// every input the node lists, so one the node names "" (scale, say, with bias
// given) would be a null value, read before Compute runs: SIGSEGV.  A struct
// kernel's constructor sees the node's input names and refuses such a node, so
// the session is not created.  Trailing inputs may be left off the node.
struct EmbedAffine {
  EmbedAffine(const OrtApi*, const OrtKernelInfo* info) {
    const Ort::ConstKernelInfo node(info);
    const char* names[] = {"ids", "table", "scale", "bias"};  // ORT refuses a fifth input
    for (size_t i = 0; i < node.GetInputCount(); ++i)
      if (node.GetInputName(i).empty())
        throw std::invalid_argument(std::string("embed_affine: the node leaves out ") + names[i] +
                                    " (named \"\"): only trailing inputs can be left out, by ending its input list");
  }
  Ort::Status Compute(const Tensor<int64_t>& ids, const Tensor<float>& table, OptionalTensor scale,
                      OptionalTensor bias, Tensor<float>& out) {
    const int64_t width = table.Shape().size() == 2 ? table.Shape()[1] : 0;
    for (const OptionalTensor& v : {scale, bias})
      if (v && (*v)->NumberOfElement() != width)
        return Ort::Status("embed: scale and bias need one value per column", ORT_INVALID_ARGUMENT);
    return gather(ids, table, 1.0f, scale ? (*scale)->Data() : nullptr,
                  bias ? (*bias)->Data() : nullptr, out);
  }
};

// CreateLiteCustomOp marks every input and output optional, so ORT would accept
// a node that names ids or out "" and the header would use its null value:
// SIGSEGV.  Declared required, ORT refuses such a node.  ids and table, the first
// two inputs of each op here, are required, and so is out.
OrtCustomOpInputOutputCharacteristic ids_and_table_required(const OrtCustomOp*, size_t index) {
  return index < 2 ? INPUT_OUTPUT_REQUIRED : INPUT_OUTPUT_OPTIONAL;
}
OrtCustomOpInputOutputCharacteristic required(const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; }

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // Compiled against headers of API version ORT_API_VERSION, loaded into a
  // runtime that may be older: ask for min(runtime, headers).  ("1.31.1" -> 31)
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  const int version = std::min(runtime, ORT_API_VERSION);
  Ort::InitApi(api_base->GetApi(version));

  // The ops and their domain must outlive every session: statics, made once.
  using Op = std::unique_ptr<Ort::Custom::OrtLiteCustomOp>;
  static const Op ops[] = {
      Op{Ort::Custom::CreateLiteCustomOp("embed", "CPUExecutionProvider", embed, embed_shape)},
      Op{Ort::Custom::CreateLiteCustomOp<EmbedScaled>("embed_scaled", "CPUExecutionProvider")},
      Op{Ort::Custom::CreateLiteCustomOp<EmbedAffine>("embed_affine", "CPUExecutionProvider")}};
  // Each op's `version` says which members of the OrtCustomOp struct exist;
  // CreateLiteCustomOp sets ORT_API_VERSION.  onnxruntime 1.24.4 and 1.25.0
  // refuse an op claiming more than their own version when a session uses it
  // ("Unsupported version '29' in custom op"; 1.31.1 does not check): claim
  // the negotiated version instead.
  static Ort::CustomOpDomain domain = [version] {
    Ort::CustomOpDomain d("my_ops");
    for (const Op& op : ops) {
      op->version = version;
      op->GetInputCharacteristic = ids_and_table_required;
      op->GetOutputCharacteristic = required;
      d.Add(op.get());
    }
    return d;
  }();
  try {
    Ort::UnownedSessionOptions(options).Add(domain);
    return nullptr;
  } catch (const Ort::Exception& e) {
    return Ort::GetApi().CreateStatus(e.GetOrtErrorCode(), e.what());
  }
}
