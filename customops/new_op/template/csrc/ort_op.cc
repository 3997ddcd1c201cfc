// my_ops::scaled_row_sum for ONNX Runtime, with the classic API
// (Ort::CustomOpBase), in a library of its own.  ORT finds one symbol in it,
// RegisterCustomOps (ort_op.lds hides the rest).  One op per dtype of T, all
// named scaled_row_sum: ORT picks the one whose input types match the node.
// The regions marked <schema:...> follow from the op's schema: regenerate
// them rather than edit them; the math is in scaled_row_sum.h.
#define ORT_API_MANUAL_INIT  // the runtime hands us its API in RegisterCustomOps
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "parallel.h"
#include "scaled_row_sum.h"
#include "sizes.h"

namespace {

const OrtApi& api() { return Ort::GetApi(); }

// An exception must never cross into ORT: every entry point below turns it
// into a status, whose text ORT passes on to the caller.
OrtStatusPtr as_status(const std::exception_ptr& error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const Ort::Exception& e) {
    return api().CreateStatus(e.GetOrtErrorCode(), e.what());
  } catch (const std::invalid_argument& e) {
    return api().CreateStatus(ORT_INVALID_ARGUMENT, e.what());
  } catch (const std::exception& e) {
    return api().CreateStatus(ORT_FAIL, e.what());
  }
}

// Stored is how a tensor's elements are stored; the math computes float16 in float.
template <typename Stored>
using math_t = std::conditional_t<std::is_same_v<Stored, Ort::Float16_t>, float, Stored>;

template <typename Stored>
constexpr ONNXTensorElementDataType element_type() {
  return Ort::TypeToTensorType<Stored>::type;
}

// An optional input is absent when the node has fewer inputs or names it
// "": then the context holds a null value, which we must check ourselves.
Ort::ConstValue optional_input(Ort::KernelContext& context, size_t index) {
  if (index >= context.GetInputCount()) return Ort::ConstValue(nullptr);
  return context.GetInput(index);
}

bool present(const Ort::ConstValue& value) { return static_cast<const OrtValue*>(value) != nullptr; }

std::vector<int64_t> shape_of(const Ort::ConstValue& value) {
  return value.GetTensorTypeAndShapeInfo().GetShape();
}

std::optional<std::vector<int64_t>> optional_shape(const Ort::ConstValue& value) {
  if (!present(value)) return std::nullopt;
  return shape_of(value);
}

// An input's elements as the math reads them: the tensor's own memory, or a
// float copy of a float16 tensor; nullptr for an absent optional input.
template <typename Stored>
class Input {
 public:
  explicit Input(const Ort::ConstValue& value) {
    if (!present(value)) return;
    data_ = value.GetTensorData<Stored>();
    if constexpr (!std::is_same_v<Stored, math_t<Stored>>) {
      copy_.resize(value.GetTensorTypeAndShapeInfo().GetElementCount());
      for (size_t i = 0; i < copy_.size(); ++i) copy_[i] = data_[i].ToFloat();
    }
  }
  const math_t<Stored>* data() const {
    if constexpr (std::is_same_v<Stored, math_t<Stored>>) return data_;
    else return data_ ? copy_.data() : nullptr;
  }

 private:
  const Stored* data_ = nullptr;
  std::vector<math_t<Stored>> copy_;
};

// An output allocated by ORT in Compute, once its shape is known; store()
// converts the math's float results into a float16 output.
template <typename Stored>
class Output {
 public:
  Output(Ort::KernelContext& context, size_t index, const std::vector<int64_t>& shape) {
    Ort::UnownedValue value = context.GetOutput(index, shape);
    data_ = value.GetTensorMutableData<Stored>();
    if constexpr (!std::is_same_v<Stored, math_t<Stored>>) copy_.resize(value.GetTensorTypeAndShapeInfo().GetElementCount());
  }
  math_t<Stored>* data() {
    if constexpr (std::is_same_v<Stored, math_t<Stored>>) return data_;
    else return copy_.data();
  }
  void store() {
    if constexpr (!std::is_same_v<Stored, math_t<Stored>>)
      for (size_t i = 0; i < copy_.size(); ++i) data_[i] = Stored(copy_[i]);
  }

 private:
  Stored* data_ = nullptr;
  std::vector<math_t<Stored>> copy_;
};

// The math's parallel_for (parallel.h) on the session's intra-op pool, through
// KernelContext_ParallelFor (API 17, as old as the shape function's C API).  ORT
// calls a C function once per chunk and its threads take the chunks in turn.  The
// chunks hold at least `grain` items each and depend on the range alone (at most
// kMaxChunks: enough to balance any pool, few enough to amortise their hand-out).
// An exception must not cross ORT's threads: the first one is kept and rethrown here.
ParallelFor ort_parallel_for(const Ort::KernelContext& context) {
  return [context](int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    constexpr int64_t kMaxChunks = 64;
    const int64_t chunks = std::min(kMaxChunks, (end - begin) / std::max<int64_t>(grain, 1));
    if (chunks <= 1) {
      if (end > begin) fn(begin, end);
      return;
    }
    struct Job {
      int64_t begin, size, chunks;
      const std::function<void(int64_t, int64_t)>& fn;
      std::mutex mutex;
      std::exception_ptr error;
    } job{begin, end - begin, chunks, fn, {}, nullptr};
    context.ParallelFor(
        [](void* data, size_t index) {
          Job& job = *static_cast<Job*>(data);
          const int64_t chunk = static_cast<int64_t>(index);
          try {
            job.fn(job.begin + job.size * chunk / job.chunks, job.begin + job.size * (chunk + 1) / job.chunks);
          } catch (...) {
            const std::lock_guard<std::mutex> lock(job.mutex);
            if (!job.error) job.error = std::current_exception();
          }
        },
        static_cast<size_t>(chunks), 0, &job);
    if (job.error) std::rethrow_exception(job.error);
  };
}

template <typename Stored>
struct ScaledRowSumKernel {
  using T = math_t<Stored>;
  // The attributes, read and checked once, when ORT creates the kernel.
  // <schema:ort-attributes>
  double scale;
  // </schema:ort-attributes>

  OrtStatusPtr ComputeV2(OrtKernelContext* raw) noexcept {
    try {
      Ort::KernelContext context(raw);
      // <schema:ort-compute>
      const Ort::ConstValue x = context.GetInput(0);
      const Ort::ConstValue weight = optional_input(context, 1);
      const Sizes sizes = scaled_row_sum_sizes(shape_of(x), optional_shape(weight));
      const int64_t rows = sizes.at("rows");
      const int64_t cols = sizes.at("cols");
      const Input<Stored> x_(x);
      const Input<Stored> weight_(weight);
      Output<Stored> sum(context, 0, {rows});
      Output<int64_t> argmax(context, 1, {rows});
      scaled_row_sum<T>(x_.data(), weight_.data(), scale, rows, cols, sum.data(), argmax.data(),
        ort_parallel_for(context));
      sum.store();
      // </schema:ort-compute>
      return nullptr;
    } catch (...) {
      return as_status(std::current_exception());
    }
  }
};

// --- the shape function ----------------------------------------------------
// A dimension as the graph knows it: a number, or -1 with a symbol's name.
// A bare -1 would erase the model's name for it ("rows"), so never write one.
struct Dim {
  int64_t size = -1;
  std::string name;
};

// Input `index`'s type and shape, owned by the context: read them, never free them.
Ort::ConstTensorTypeAndShapeInfo input_info(OrtShapeInferContext* context, size_t index) {
  OrtTensorTypeAndShapeInfo* raw = nullptr;
  Ort::ThrowOnError(api().ShapeInferContext_GetInputTypeShape(context, index, &raw));
  return Ort::ConstTensorTypeAndShapeInfo(raw);
}

ONNXTensorElementDataType input_type(OrtShapeInferContext* context, size_t index) {
  return input_info(context, index).GetElementType();
}

// Axis `axis` of input `index`, as the graph has it: its number, or its
// symbol (the model's own name for it, else `name`).
Dim input_dim(OrtShapeInferContext* context, size_t index, size_t rank, size_t axis, const char* name) {
  const Ort::ConstTensorTypeAndShapeInfo info = input_info(context, index);
  if (info.GetDimensionsCount() != rank) return {-1, name};  // the run will refuse it
  const int64_t size = info.GetShape()[axis];
  const std::string symbol = info.GetSymbolicDimensions()[axis];
  return {size, size >= 0 ? "" : (symbol.empty() ? name : symbol)};
}

// Through the C API: the C++ wrapper's ShapeInferContext::SetOutputShape
// cannot write a named dimension (its failure is dropped, and the output
// gets no shape at all).
void set_output(OrtShapeInferContext* context, size_t index, ONNXTensorElementDataType type,
                const std::vector<Dim>& dims) {
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  for (const Dim& dim : dims) sizes.push_back(dim.size), names.push_back(dim.name);
  const Ort::TensorTypeAndShapeInfo info(type, sizes, &names);
  Ort::ThrowOnError(api().ShapeInferContext_SetOutputTypeShape(context, index, info));
}

OrtStatusPtr infer_shape(const OrtCustomOp*, OrtShapeInferContext* context) noexcept {
  try {
    // <schema:ort-shape>
    const Dim rows = input_dim(context, 0, 2, 0, "rows");
    const ONNXTensorElementDataType T = input_type(context, 0);
    set_output(context, 0, T, {rows});
    set_output(context, 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, {rows});
    // </schema:ort-shape>
    return nullptr;
  } catch (...) {
    return as_status(std::current_exception());
  }
}

// --- reading attributes, once per kernel -------------------------------------
// ORT reports a CreateKernelV2 status as "Exception during initialization:
// <text>", dropping its code, so the text says it all.  An attribute the node
// does not carry takes the schema's default, if it has one.
// onnxruntime (1.24 to 1.32) reads a list attribute of another type (an INT,
// or FLOATS for INTS) as an empty list, without an error: so an empty list is
// tried as every other type, and a hit named as the mistake it is.
bool holds_another_type(const OrtKernelInfo* info, const char* name, bool ints) {
  const Ort::ConstKernelInfo kernel_info(info);
  const auto reads = [](auto read) {
    try {
      return read();
    } catch (const Ort::Exception&) {
      return false;
    }
  };
  return reads([&] { return (kernel_info.GetAttribute<float>(name), true); }) ||
         reads([&] { return (kernel_info.GetAttribute<int64_t>(name), true); }) ||
         reads([&] { return (kernel_info.GetAttribute<std::string>(name), true); }) ||
         reads([&] { return ints ? !kernel_info.GetAttributes<float>(name).empty()
                                 : !kernel_info.GetAttributes<int64_t>(name).empty(); });
}

template <typename V>
V read_attribute(const OrtKernelInfo* info, const char* name, const char* type, const std::optional<V>& fallback) {
  const std::string wrong = std::string("scaled_row_sum: attribute ") + name + " (a " + type + ") is missing or not a " + type;
  try {
    if constexpr (std::is_same_v<V, std::vector<int64_t>> || std::is_same_v<V, std::vector<float>>) {
      V values = Ort::ConstKernelInfo(info).GetAttributes<typename V::value_type>(name);
      if (values.empty() && holds_another_type(info, name, std::is_same_v<V, std::vector<int64_t>>))
        throw std::invalid_argument(wrong + ": it holds another type");
      return values;
    } else {
      return Ort::ConstKernelInfo(info).GetAttribute<V>(name);
    }
  } catch (const Ort::Exception& e) {
    if (fallback && std::string(e.what()).find("No attribute with name") != std::string::npos) return *fallback;
    throw std::invalid_argument(wrong + ": " + e.what());
  }
}

double read_float(const OrtKernelInfo* info, const char* name, std::optional<double> fallback = std::nullopt) {
  return read_attribute<float>(info, name, "FLOAT", fallback);
}
int64_t read_int(const OrtKernelInfo* info, const char* name, std::optional<int64_t> fallback = std::nullopt) {
  return read_attribute<int64_t>(info, name, "INT", fallback);
}
bool read_bool(const OrtKernelInfo* info, const char* name, std::optional<bool> fallback = std::nullopt) {
  const int64_t value = read_attribute<int64_t>(info, name, "INT", fallback);
  if (value != 0 && value != 1)
    throw std::invalid_argument(std::string("scaled_row_sum: attribute ") + name + " (a bool) must be 0 or 1, got " +
                                std::to_string(value));
  return value;
}
std::string read_string(const OrtKernelInfo* info, const char* name, std::optional<std::string> fallback = std::nullopt) {
  return read_attribute<std::string>(info, name, "STRING", fallback);
}
std::vector<int64_t> read_ints(const OrtKernelInfo* info, const char* name,
                               std::optional<std::vector<int64_t>> fallback = std::nullopt) {
  return read_attribute<std::vector<int64_t>>(info, name, "INTS", fallback);
}
std::vector<double> read_floats(const OrtKernelInfo* info, const char* name,
                                std::optional<std::vector<double>> fallback = std::nullopt) {
  const std::optional<std::vector<float>> as_float =
      fallback ? std::optional(std::vector<float>(fallback->begin(), fallback->end())) : std::nullopt;
  const std::vector<float> values = read_attribute<std::vector<float>>(info, name, "FLOATS", as_float);
  return {values.begin(), values.end()};
}

template <typename Stored>
struct ScaledRowSumOp : Ort::CustomOpBase<ScaledRowSumOp<Stored>, ScaledRowSumKernel<Stored>, /*WithStatus=*/true> {
  // onnxruntime 1.23.2 crashes inside itself, at session creation, running an op's shape
  // function on a node that omits an optional input (1.24.1 does not): there an op with
  // optional inputs goes without one, and its outputs' shapes are known at run time only.
  explicit ScaledRowSumOp(int runtime) {
    bool optional = false;
    for (size_t i = 0; i < kInputs; ++i) optional |= GetInputCharacteristic(i) == INPUT_OUTPUT_OPTIONAL;
    if (runtime >= 24 || !optional) this->InferOutputShapeFn = infer_shape;
  }
  const char* GetName() const { return "scaled_row_sum"; }

  // Declared optional, ORT accepts a node without the input and hands the
  // kernel a null value; declared required, it refuses such a model at load.
  // <schema:ort-types>
  static constexpr size_t kInputs = 2, kOutputs = 2;
  ONNXTensorElementDataType GetInputType(size_t index) const {
    const ONNXTensorElementDataType types[] = {element_type<Stored>(), element_type<Stored>()};
    return types[index];
  }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t index) const {
    const bool optional[] = {false, true};
    return optional[index] ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  }
  ONNXTensorElementDataType GetOutputType(size_t index) const {
    const ONNXTensorElementDataType types[] = {element_type<Stored>(), ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64};
    return types[index];
  }
  // </schema:ort-types>
  size_t GetInputTypeCount() const { return kInputs; }
  size_t GetOutputTypeCount() const { return kOutputs; }
  OrtCustomOpInputOutputCharacteristic GetOutputCharacteristic(size_t) const { return INPUT_OUTPUT_REQUIRED; }

  // Once per node, at session creation: a bad attribute fails the session, not every run.
  OrtStatusPtr CreateKernelV2(const OrtApi&, const OrtKernelInfo* info, void** result) const noexcept {
    try {
      // <schema:ort-create>
      auto kernel = std::make_unique<ScaledRowSumKernel<Stored>>();
      kernel->scale = read_float(info, "scale");
      check_scaled_row_sum_attributes(kernel->scale);
      // </schema:ort-create>
      *result = kernel.release();
      return nullptr;
    } catch (...) {
      return as_status(std::current_exception());
    }
  }
};

}  // namespace

extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // Ask the runtime for min(its API version, the headers'): "1.31.1" -> 31.
  // The headers' own ORT_API_VERSION would get NULL from an older runtime.
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  const int version = std::min(runtime, ORT_API_VERSION);
  Ort::InitApi(api_base->GetApi(version));

  // <schema:ort-register>
  // One op per dtype, all named scaled_row_sum; they and their domain outlive every session.
  static ScaledRowSumOp<float> op_float32{runtime};
  static Ort::CustomOpDomain domain = [version] {
    Ort::CustomOpDomain d("my_ops");
    op_float32.version = version;  // the op's API version: older runtimes refuse a newer one
    d.Add(&op_float32);
    return d;
  }();
  // </schema:ort-register>
  try {
    Ort::UnownedSessionOptions(options).Add(domain);
    return nullptr;
  } catch (...) {
    return as_status(std::current_exception());
  }
}
