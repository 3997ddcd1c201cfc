// check::group_sum(x T[n, d], group int64[n], float scale = 1, int mean = 0) -> y T[g, d]:
// y[k] = scale * the sum of x's rows whose group is k (mean != 0: divided by
// their count; a group with no rows gives 0), g = the last group + 1 (0 rows
// when n is 0): a size known only from the data.  group must be sorted and
// non-negative (refused otherwise).  T is float16, float32 or float64 (one op
// per type, one name); float16 sums in float, rounds once.  A correct op that
// passes customops.check, and with one BUG_* macro the same op with one bug
// that the check's exploration exists for (tests/test_check_explore.py builds
// each; the user's samples alone never show them):
//   g++ -std=c++17 -O2 -shared -fPIC -Wl,--version-script=exports.lds -I$ORT_INCLUDE
//       group_sum.cc -o libgroup_sum.so
//   BUG_MEAN_ATTRIBUTE  mean != 0 divides by all the rows, not the group's   -> attributes
//   BUG_HALF_SUM        float16 sums in half precision: off by many units in
//                       the last place in groups of hundreds of rows        -> larger
//   BUG_EMPTY_GROUP     starts each group's sum at row k mod its size, also
//                       for a group with no rows: SIGFPE on a gap in the ids -> indices
#define ORT_API_MANUAL_INIT  // the runtime hands us its API in RegisterCustomOps
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace {

const OrtApi& api() { return Ort::GetApi(); }

// The sum's type and the conversions: float16 is summed in float.
template <typename T> struct Num {
  using Sum = T;
  static Sum up(T v) { return v; }
  static T down(Sum v) { return v; }
};
template <> struct Num<Ort::Float16_t> {
  using Sum = float;
  static float up(Ort::Float16_t v) { return v.ToFloat(); }
  static Ort::Float16_t down(float v) { return Ort::Float16_t(v); }
};

template <typename T> ONNXTensorElementDataType element_type();
template <> ONNXTensorElementDataType element_type<float>() { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
template <> ONNXTensorElementDataType element_type<double>() { return ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE; }
template <> ONNXTensorElementDataType element_type<Ort::Float16_t>() { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16; }

template <typename T> struct GroupSumKernel {
  float scale = 1.0f;
  int64_t mean = 0;

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
    const Ort::ConstValue x_value = context.GetInput(0), group_value = context.GetInput(1);
    const std::vector<int64_t> shape = x_value.GetTensorTypeAndShapeInfo().GetShape();
    const std::vector<int64_t> group_shape = group_value.GetTensorTypeAndShapeInfo().GetShape();
    if (shape.size() != 2 || group_shape.size() != 1 || group_shape[0] != shape[0])
      throw std::invalid_argument("group_sum: x must be 2-D [n, d] and group 1-D [n]");
    const int64_t n = shape[0], d = shape[1];
    const T* x = x_value.GetTensorData<T>();
    const int64_t* group = group_value.GetTensorData<int64_t>();
    for (int64_t r = 0; r < n; ++r)
      if (group[r] < 0 || (r && group[r] < group[r - 1]))
        throw std::invalid_argument("group_sum: group must be sorted and non-negative");
    const int64_t groups = n ? group[n - 1] + 1 : 0;
    T* y = context.GetOutput(0, {groups, d}).GetTensorMutableData<T>();
    int64_t begin = 0;
    for (int64_t k = 0; k < groups; ++k) {
      int64_t end = begin;
      while (end < n && group[end] == k) ++end;
      const int64_t count = end - begin;
      // each group's sum starts at row k mod its size (spreads rounding; any order is a sum)
#ifdef BUG_EMPTY_GROUP
      const int64_t first = k % count;
#else
      const int64_t first = count ? k % count : 0;
#endif
      for (int64_t c = 0; c < d; ++c) {
        typename Num<T>::Sum sum = 0;
        for (int64_t j = 0; j < count; ++j) {
          const int64_t r = begin + (first + j) % count;
#ifdef BUG_HALF_SUM
          sum = Num<T>::up(Num<T>::down(sum + Num<T>::up(x[r * d + c])));  // rounds every step
#else
          sum += Num<T>::up(x[r * d + c]);
#endif
        }
        typename Num<T>::Sum value = sum * static_cast<typename Num<T>::Sum>(scale);
#ifdef BUG_MEAN_ATTRIBUTE
        if (mean && n) value /= static_cast<typename Num<T>::Sum>(n);
#else
        if (mean && count) value /= static_cast<typename Num<T>::Sum>(count);
#endif
        y[k * d + c] = Num<T>::down(value);
      }
      begin = end;
    }
  }
};

template <typename T>
struct GroupSumOp : Ort::CustomOpBase<GroupSumOp<T>, GroupSumKernel<T>, /*WithStatus=*/true> {
  OrtStatusPtr CreateKernelV2(const OrtApi&, const OrtKernelInfo* info, void** kernel) const {
    auto* made = new GroupSumKernel<T>;
    // an absent attribute keeps its default (the status saying so is dropped)
    api().ReleaseStatus(api().KernelInfoGetAttribute_float(info, "scale", &made->scale));
    api().ReleaseStatus(api().KernelInfoGetAttribute_int64(info, "mean", &made->mean));
    *kernel = made;
    return nullptr;
  }
  const char* GetName() const { return "group_sum"; }
  size_t GetInputTypeCount() const { return 2; }
  ONNXTensorElementDataType GetInputType(size_t i) const {
    return i == 0 ? element_type<T>() : ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return element_type<T>(); }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  const int version = std::min(runtime, ORT_API_VERSION);
  Ort::InitApi(api_base->GetApi(version));
  static GroupSumOp<Ort::Float16_t> half;
  static GroupSumOp<float> single;
  static GroupSumOp<double> twice;
  static Ort::CustomOpDomain domain = [version] {
    Ort::CustomOpDomain d("check");
    for (OrtCustomOp* op : std::vector<OrtCustomOp*>{&half, &single, &twice}) {
      op->version = version;
      d.Add(op);
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
