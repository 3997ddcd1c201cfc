// my_ops::embed with ONNX Runtime's classic API (Ort::CustomOpBase), in one
// file that needs only the ORT headers:
//   g++ -std=c++17 -O2 -shared -fPIC -I$ORT_INCLUDE embed_classic.cc -o libembed_classic.so -Wl,--version-script=exports.lds
// (csrc/ort/exports.lds: RegisterCustomOps is the one symbol the library exports)
//
//   embed(ids int64[...], table float[rows, width], scale float[width]?, bias float[width]?)
//     -> float[..., width] = table[ids] * scale + bias
// Either optional input may be left out, the middle one too.  Output shape
// inference: the graph knows out's shape before the model runs.  Version 2
// of the op (version 1, in embed_lite.cc, had no scale and bias).
#define ORT_API_MANUAL_INIT  // the runtime hands us its API in RegisterCustomOps
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const OrtApi& api() { return Ort::GetApi(); }

// The kernel: one per node.  Errors come back as a status, never an exception.
struct EmbedKernel {
  OrtStatusPtr ComputeV2(OrtKernelContext* raw) noexcept {
    try {
      compute(Ort::KernelContext(raw));
      return nullptr;
    } catch (const std::invalid_argument& e) {
      return api().CreateStatus(ORT_INVALID_ARGUMENT, e.what());
    } catch (const std::exception& e) {
      return api().CreateStatus(ORT_FAIL, e.what());
    }
  }

  void compute(Ort::KernelContext context) {
    const Ort::ConstValue ids = context.GetInput(0), table = context.GetInput(1);
    const std::vector<int64_t> table_shape = table.GetTensorTypeAndShapeInfo().GetShape();
    if (table_shape.size() != 2) throw std::invalid_argument("embed: table must be 2-D");
    const int64_t rows = table_shape[0], width = table_shape[1];
    const float* scale = optional_input(context, 2, width);
    const float* bias = optional_input(context, 3, width);

    std::vector<int64_t> shape = ids.GetTensorTypeAndShapeInfo().GetShape();
    const int64_t count = ids.GetTensorTypeAndShapeInfo().GetElementCount();
    shape.push_back(width);
    float* y = context.GetOutput(0, shape).GetTensorMutableData<float>();
    const int64_t* id = ids.GetTensorData<int64_t>();
    const float* t = table.GetTensorData<float>();
    for (int64_t i = 0; i < count; ++i) {
      if (id[i] < 0 || id[i] >= rows)
        throw std::invalid_argument("embed: id " + std::to_string(id[i]) +
                                    " is not a row of the " + std::to_string(rows) + "-row table");
      for (int64_t j = 0; j < width; ++j)
        y[i * width + j] = t[id[i] * width + j] * (scale ? scale[j] : 1.0f) + (bias ? bias[j] : 0.0f);
    }
  }

  // An optional input is absent when the node has fewer inputs or names it
  // "": then the context holds a null value, which we check ourselves.
  static const float* optional_input(Ort::KernelContext& context, size_t index, int64_t width) {
    if (index >= context.GetInputCount()) return nullptr;
    const Ort::ConstValue value = context.GetInput(index);
    if (static_cast<const OrtValue*>(value) == nullptr) return nullptr;
    if (value.GetTensorTypeAndShapeInfo().GetElementCount() != static_cast<size_t>(width))
      throw std::invalid_argument("embed: scale and bias need one value per column");
    return value.GetTensorData<float>();
  }
};

// Sets out's type and shape: ids' dimensions, then table's second one, each
// a number or a symbol ("batch") as the graph has it.
OrtStatusPtr infer_shape(const OrtCustomOp*, OrtShapeInferContext* context) noexcept {
  try {
    // The two infos below belong to the context, which frees them: read them
    // through the non-owning ConstTensorTypeAndShapeInfo.  The owning
    // Ort::TensorTypeAndShapeInfo would free them a second time, and the
    // process dies: "free(): double free detected".
    OrtTensorTypeAndShapeInfo *ids_info = nullptr, *table_info = nullptr;
    Ort::ThrowOnError(api().ShapeInferContext_GetInputTypeShape(context, 0, &ids_info));
    Ort::ThrowOnError(api().ShapeInferContext_GetInputTypeShape(context, 1, &table_info));
    const Ort::ConstTensorTypeAndShapeInfo ids(ids_info), table(table_info);

    std::vector<int64_t> dims = ids.GetShape();
    std::vector<const char*> symbols = ids.GetSymbolicDimensions();
    if (table.GetDimensionsCount() == 2) {
      dims.push_back(table.GetShape()[1]);
      symbols.push_back(table.GetSymbolicDimensions()[1]);
    } else {
      dims.push_back(-1);  // unknown
      symbols.push_back("");
    }
    const std::vector<std::string> names(symbols.begin(), symbols.end());
    // This one is ours: the owning wrapper frees it when we are done.
    const Ort::TensorTypeAndShapeInfo out(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, dims, &names);
    Ort::ThrowOnError(api().ShapeInferContext_SetOutputTypeShape(context, 0, out));
    return nullptr;
  } catch (const Ort::Exception& e) {
    return api().CreateStatus(e.GetOrtErrorCode(), e.what());
  }
}

struct EmbedOp : Ort::CustomOpBase<EmbedOp, EmbedKernel, /*WithStatus=*/true> {
  EmbedOp() {
    InferOutputShapeFn = infer_shape;
    // The versions of domain my_ops this kernel serves; the base reports
    // them to ORT through GetStartVersion / GetEndVersion.
    start_ver_ = 2;
    end_ver_ = 2;
  }
  const char* GetName() const { return "embed"; }
  size_t GetInputTypeCount() const { return 4; }
  ONNXTensorElementDataType GetInputType(size_t index) const {
    return index == 0 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t index) const {
    return index >= 2 ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
  OrtStatusPtr CreateKernelV2(const OrtApi&, const OrtKernelInfo*, void** kernel) const {
    *kernel = new EmbedKernel;
    return nullptr;
  }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // Ask the runtime for min(its API version, the headers'): "1.31.1" -> 31.
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  const int version = std::min(runtime, ORT_API_VERSION);
  Ort::InitApi(api_base->GetApi(version));

  static EmbedOp op;  // the op and its domain outlive every session
  static Ort::CustomOpDomain domain = [version] {
    Ort::CustomOpDomain d("my_ops");
    op.version = version;  // not ORT_API_VERSION: older runtimes refuse that (embed_lite.cc)
    d.Add(&op);
    return d;
  }();
  try {
    Ort::UnownedSessionOptions(options).Add(domain);
    return nullptr;
  } catch (const Ort::Exception& e) {
    return api().CreateStatus(e.GetOrtErrorCode(), e.what());
  }
}
