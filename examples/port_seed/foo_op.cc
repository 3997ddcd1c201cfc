// custom::Foo (Z = X + Y) ported from the removed Ort::CustomOpApi to the
// current C++ API, as a library ORT loads with register_custom_ops_library:
//   g++ -std=c++17 -O2 -shared -fPIC -I$ORT_INCLUDE foo_op.cc -o libfoo_op.so -Wl,--version-script=exports.lds
// (csrc/ort/exports.lds: RegisterCustomOps is the one symbol the library exports)
#define ORT_API_MANUAL_INIT  // the runtime hands us its API in RegisterCustomOps
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstdlib>
#include <cstring>

struct MyCustomKernel {
  // Was Compute(OrtKernelContext*) through an Ort::CustomOpApi member; the
  // wrappers now call the API themselves, and V2 returns errors as a status.
  OrtStatusPtr ComputeV2(OrtKernelContext* raw) {
    Ort::KernelContext context(raw);
    const Ort::ConstValue x = context.GetInput(0), y = context.GetInput(1);
    const std::vector<int64_t> shape = x.GetTensorTypeAndShapeInfo().GetShape();
    // The old kernel read Y out of bounds when it was smaller than X.
    if (y.GetTensorTypeAndShapeInfo().GetShape() != shape)
      return Ort::GetApi().CreateStatus(ORT_INVALID_ARGUMENT, "Foo: X and Y need one shape");
    Ort::UnownedValue z = context.GetOutput(0, shape);
    const size_t size = z.GetTensorTypeAndShapeInfo().GetElementCount();
    const float *X = x.GetTensorData<float>(), *Y = y.GetTensorData<float>();
    float* out = z.GetTensorMutableData<float>();
    for (size_t i = 0; i < size; i++) out[i] = X[i] + Y[i];
    return nullptr;
  }
};

struct MyCustomOp : Ort::CustomOpBase<MyCustomOp, MyCustomKernel, /*WithStatus=*/true> {
  OrtStatusPtr CreateKernelV2(const OrtApi&, const OrtKernelInfo*, void** kernel) const {
    *kernel = new MyCustomKernel;
    return nullptr;
  }
  const char* GetName() const { return "Foo"; }
  size_t GetInputTypeCount() const { return 2; }
  ONNXTensorElementDataType GetInputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

extern "C" __attribute__((visibility("default"))) OrtStatus* ORT_API_CALL
RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // API version negotiation and lifetimes as in ../my_first_op/embed_lite.cc
  const int runtime = std::atoi(std::strchr(api_base->GetVersionString(), '.') + 1);
  const int version = std::min(runtime, ORT_API_VERSION);
  Ort::InitApi(api_base->GetApi(version));
  static MyCustomOp op;
  static Ort::CustomOpDomain domain = [version] {
    Ort::CustomOpDomain d("custom");  // the domain the old test.cpp added
    op.version = version;
    d.Add(&op);
    return d;
  }();
  try {
    Ort::UnownedSessionOptions(options).Add(domain);
    return nullptr;
  } catch (const Ort::Exception& e) {
    return Ort::GetApi().CreateStatus(e.GetOrtErrorCode(), e.what());
  }
}
