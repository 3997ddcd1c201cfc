// host: runs the exported my_ops::scaled_row_sum model with ONNX Runtime's
// C++ API and the op's library, no Python involved.
//   host MODEL.onnx LIBRARY.so
// Feeds x = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]] and weight =
// [1, -1, 2, 0.5], and prints each output as "name v0 v1 ...".
#include <onnxruntime_cxx_api.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: host MODEL.onnx LIBRARY.so\n");
    return 2;
  }
  try {
    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "host");  // one per process, outlives the session
    Ort::SessionOptions options;
    options.SetIntraOpNumThreads(1);
    options.RegisterCustomOpsLibrary(argv[2]);  // before the session: it needs our op to load the model
    Ort::Session session(env, argv[1], options);

    // Tensors over our own buffers (no copy: the buffers outlive Run).
    std::vector<float> x(12), weight{1.0f, -1.0f, 2.0f, 0.5f};
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
    const std::vector<int64_t> x_shape{3, 4}, weight_shape{4};
    const Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    std::vector<Ort::Value> inputs;
    inputs.push_back(Ort::Value::CreateTensor<float>(cpu, x.data(), x.size(), x_shape.data(), 2));
    inputs.push_back(Ort::Value::CreateTensor<float>(cpu, weight.data(), weight.size(), weight_shape.data(), 1));

    const char* input_names[] = {"x", "weight"};
    const char* output_names[] = {"sum", "argmax"};
    std::vector<Ort::Value> outputs =
        session.Run(Ort::RunOptions{nullptr}, input_names, inputs.data(), 2, output_names, 2);

    const size_t rows = outputs[0].GetTensorTypeAndShapeInfo().GetElementCount();
    std::printf("sum");
    for (size_t i = 0; i < rows; ++i) std::printf(" %.9g", outputs[0].GetTensorData<float>()[i]);
    std::printf("\nargmax");
    for (size_t i = 0; i < rows; ++i) std::printf(" %lld", static_cast<long long>(outputs[1].GetTensorData<int64_t>()[i]));
    std::printf("\n");
    return 0;
  } catch (const Ort::Exception& e) {  // every failing Ort:: call throws one
    std::fprintf(stderr, "host: %s\n", e.what());
    return 1;
  }
}
