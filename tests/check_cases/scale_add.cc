// check::scale_add(x float[n, d], y float[n, d]) -> z float[n, d] = 2 * x + y, a
// correct ONNX Runtime custom op (classic API) that passes customops.check,
// and, with one of the BUG_* macros defined, the same op with one bug that
// one check exists for (tests/test_check.py builds each):
//   g++ -std=c++17 -O2 -shared -fPIC -Wl,--version-script=exports.lds -I$ORT_INCLUDE
//       scale_add.cc -o libscale_add.so
//   BUG_WRONG_RANK      the shape function declares z with rank 1     -> declared
//   BUG_UNNAMED_DIM     the shape function writes -1 without its name (as
//                       GetShape alone gives it): the model's u0 is lost -> declared
//   BUG_WRAPPER_SHAPE   the shape function through the C++ wrapper
//                       Ort::ShapeInferContext::SetOutputShape, which cannot
//                       write a named dimension: no shape at all  -> declared
//   BUG_OPTIONAL_UNCHECKED  an optional input 2 the model never gives, read
//                       without a null check when a node names it empty -> omitted
//   BUG_ABORT_ON_RANK   aborts the process on an input of another rank
//                       instead of returning an error status            -> types
//   BUG_INF_LOOP        wraps x into [0, 1) by steps of 1: never ends on inf -> nonfinite
//   BUG_ACCUMULATE      adds into a member never zeroed: the second call of
//                       a session is wrong                                -> determinism
//   BUG_INSTANCE_ORDER  each kernel instance picks its summation order from
//                       a counter: a fresh session rounds differently     -> determinism
//   BUG_WRONG_SIZE      the shape function declares z's dimension 1 as 8  -> declared
//   BUG_API_VERSION     asks every runtime for the headers' API version (GetApi
//                       returns NULL in older ones): they crash             -> runtimes
//   BUG_EXPORTS         (a build without the version script, not a macro):
//                       the C++ standard library's symbols are exported    -> library
//   BUG_MEMBER_SCRATCH  the kernel keeps its scratch in a member      -> threads
//   BUG_LARGE_SAMPLE    a fixed 64-row buffer: wrong from row 64 on   -> reference
//   BUG_EMPTY_INPUT     divides by the number of rows                 -> empty
//   BUG_LITE_API        the lite API's function kernel, which marks every
//                       input optional: an omitted input crashes in the
//                       header's Tensor<float> constructor (CreateTuple),
//                       before the function's first line             -> omitted
#define ORT_API_MANUAL_INIT  // the runtime hands us its API in RegisterCustomOps
#include <onnxruntime_cxx_api.h>
#include <onnxruntime_lite_custom_op.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

const OrtApi& api() { return Ort::GetApi(); }

#ifdef BUG_INSTANCE_ORDER
std::atomic<int> kernels_made{0};
#endif

struct ScaleAddKernel {
#ifdef BUG_INSTANCE_ORDER
  const bool left_first = kernels_made++ % 2 == 0;  // differs from one session to the next
#endif
#ifdef BUG_ACCUMULATE
  std::vector<float> sum;  // grown once, never zeroed between calls
#endif
#ifdef BUG_MEMBER_SCRATCH
  std::vector<float> scratch;  // shared by every call of this node: a race under threads
#endif

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
    const Ort::ConstValue x = context.GetInput(0), y = context.GetInput(1);
    const std::vector<int64_t> shape = x.GetTensorTypeAndShapeInfo().GetShape();
#ifdef BUG_ABORT_ON_RANK
    if (shape.size() != 2) std::abort();  // an assert where a status belongs
#endif
    if (shape.size() != 2 || y.GetTensorTypeAndShapeInfo().GetShape() != shape)
      throw std::invalid_argument("scale_add: x and y must be 2-D of one shape");
    const float* a = x.GetTensorData<float>();
    const float* b = y.GetTensorData<float>();
    float* z = context.GetOutput(0, shape).GetTensorMutableData<float>();
#ifdef BUG_OPTIONAL_UNCHECKED
    // an optional bias (input 2) that the model never gives: a node naming it
    // empty hands the kernel a null value, read here without a check
    if (context.GetInputCount() > 2) {
      const Ort::ConstValue bias = context.GetInput(2);
      if (bias.GetTensorTypeAndShapeInfo().GetElementCount() != 1)
        throw std::invalid_argument("scale_add: bias must hold one value");
    }
#endif
#ifdef BUG_MEMBER_SCRATCH
    const int64_t count = shape[0] * shape[1];
    scratch.assign(a, a + count);
    for (int64_t i = 0; i < count; ++i) scratch[i] *= 2.0f;
    for (int64_t i = 0; i < count; ++i) z[i] = scratch[i] + b[i];
#elif defined(BUG_LARGE_SAMPLE)
    float doubled[64 * 16];
    const int64_t count = shape[0] * shape[1];
    const int64_t kept = std::min<int64_t>(count, 64 * 16);
    for (int64_t i = 0; i < kept; ++i) doubled[i] = 2.0f * a[i];
    for (int64_t i = 0; i < count; ++i) z[i] = doubled[i % (64 * 16)] + b[i];
#elif defined(BUG_INF_LOOP)
    const int64_t count = shape[0] * shape[1];
    for (int64_t i = 0; i < count; ++i) {
      float wrapped = a[i];  // its fractional part, the slow way: inf - 1 is inf
      while (wrapped >= 1.0f) wrapped -= 1.0f;
      while (wrapped < 0.0f) wrapped += 1.0f;
      z[i] = 2.0f * a[i] + b[i] + 0.0f * wrapped;
    }
#elif defined(BUG_ACCUMULATE)
    const int64_t count = shape[0] * shape[1];
    if (sum.size() < static_cast<size_t>(count)) sum.resize(count);  // zeroes only new room
    for (int64_t i = 0; i < count; ++i) sum[i] += 2.0f * a[i] + b[i];
    std::copy(sum.begin(), sum.begin() + count, z);
#elif defined(BUG_INSTANCE_ORDER)
    const int64_t count = shape[0] * shape[1];
    for (int64_t i = 0; i < count; ++i) z[i] = left_first ? (a[i] + a[i]) + b[i] : a[i] + (a[i] + b[i]);
#else
#ifdef BUG_EMPTY_INPUT
    // no rows: an integer division by zero (SIGFPE)
    const int64_t width = static_cast<int64_t>(x.GetTensorTypeAndShapeInfo().GetElementCount()) / shape[0];
#else
    const int64_t width = shape[1];
#endif
    for (int64_t r = 0; r < shape[0]; ++r)
      for (int64_t i = r * width; i < (r + 1) * width; ++i) z[i] = 2.0f * a[i] + b[i];
#endif
  }
};

struct ScaleAddOp : Ort::CustomOpBase<ScaleAddOp, ScaleAddKernel, /*WithStatus=*/true> {
  ScaleAddOp() {
    InferOutputShapeFn = infer_shape;
  }
  OrtStatusPtr CreateKernelV2(const OrtApi&, const OrtKernelInfo*, void** kernel) const {
    *kernel = new ScaleAddKernel;
    return nullptr;
  }
  const char* GetName() const { return "scale_add"; }
#ifdef BUG_OPTIONAL_UNCHECKED
  size_t GetInputTypeCount() const { return 3; }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t i) const {
    return i == 2 ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  }
#else
  size_t GetInputTypeCount() const { return 2; }
#endif
  ONNXTensorElementDataType GetInputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }

  // z has x's shape, named dimensions included.  (Through the C API:
  // Ort::ShapeInferContext::SetOutputShape of the 1.29 headers marks a named
  // dimension -2, which onnxruntime 1.32.0 refuses, and ORT drops the status.)
  static OrtStatusPtr infer_shape(const OrtCustomOp*, OrtShapeInferContext* context) noexcept {
    try {
#ifdef BUG_WRAPPER_SHAPE
      // The C++ wrapper: with a symbolic input dimension it writes -2, which
      // the runtime refuses, and the runtime drops the refusal: no shape.
      Ort::ShapeInferContext wrapper(&api(), context);
      return wrapper.SetOutputShape(0, wrapper.GetInputShape(0)).release();
#endif
      OrtTensorTypeAndShapeInfo* x_info = nullptr;  // the context's: not ours to free
      Ort::ThrowOnError(api().ShapeInferContext_GetInputTypeShape(context, 0, &x_info));
      const Ort::ConstTensorTypeAndShapeInfo x(x_info);
      std::vector<int64_t> dims = x.GetShape();
      const std::vector<const char*> symbols = x.GetSymbolicDimensions();
      std::vector<std::string> names(symbols.begin(), symbols.end());
#ifdef BUG_WRONG_RANK
      dims.pop_back();  // (n, d) -> (n)
      names.pop_back();
#elif defined(BUG_WRONG_SIZE)
      if (dims.size() == 2) dims[1] = 8;
#elif defined(BUG_UNNAMED_DIM)
      names.assign(names.size(), "");
#endif
      const Ort::TensorTypeAndShapeInfo z(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, dims, &names);
      Ort::ThrowOnError(api().ShapeInferContext_SetOutputTypeShape(context, 0, z));
      return nullptr;
    } catch (const Ort::Exception& e) {
      return api().CreateStatus(e.GetOrtErrorCode(), e.what());
    }
  }
};

#ifdef BUG_LITE_API
// The lite API's spelling of the same kernel: a function of the op's inputs and outputs.
Ort::Status scale_add_lite(const Ort::Custom::Tensor<float>& x, const Ort::Custom::Tensor<float>& y,
                           Ort::Custom::Tensor<float>& z) {
  const float* a = x.Data();
  const float* b = y.Data();  // never reached with y omitted: the header crashed making y
  float* out = z.Allocate(x.Shape());
  for (int64_t i = 0; i < x.NumberOfElement(); ++i) out[i] = 2.0f * a[i] + b[i];
  return Ort::Status{nullptr};
}
#endif

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // Built against newer headers than some runtimes it loads into: ask for
  // min(runtime, headers), and claim that version for the op.
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
#ifdef BUG_API_VERSION
  const int version = ORT_API_VERSION + 0 * runtime;
#else
  const int version = std::min(runtime, ORT_API_VERSION);
#endif
  Ort::InitApi(api_base->GetApi(version));
  // The op and its domain outlive every session: statics, made once.
#ifdef BUG_LITE_API
  static OrtCustomOp* const op =
      Ort::Custom::CreateLiteCustomOp("scale_add", "CPUExecutionProvider", scale_add_lite);
#else
  static ScaleAddOp classic;
  static OrtCustomOp* const op = &classic;
#endif
  static Ort::CustomOpDomain domain = [version] {
    op->version = version;
    Ort::CustomOpDomain d("check");
    d.Add(op);
    return d;
  }();
  try {
    Ort::UnownedSessionOptions(options).Add(domain);
    return nullptr;
  } catch (const Ort::Exception& e) {
    return Ort::GetApi().CreateStatus(e.GetOrtErrorCode(), e.what());
  }
}
