// host: runs an exported model with ONNX Runtime's C++ API and the op's
// library, no Python involved.
//   host MODEL.onnx LIBRARY.so DIR
// Reads each model input from DIR/<input name>.npy and writes each output to
// DIR/<output name>.npy (little-endian, C order: what numpy.save writes).
#include <onnxruntime_cxx_api.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// numpy's dtype codes of the element types an op may take.
const std::map<std::string, ONNXTensorElementDataType> kTypes{
    {"<f4", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT}, {"<f8", ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE},
    {"<f2", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16}, {"<i8", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64},
    {"<i4", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32}, {"|b1", ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL}};

struct Array {
  ONNXTensorElementDataType type;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
Array read_npy(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot open " + path);
  char magic[8];
  file.read(magic, 8);
  if (std::string(magic, 6) != "\x93NUMPY") throw std::runtime_error(path + " is not a .npy file");
  uint32_t header_size = 0;
  file.read(reinterpret_cast<char*>(&header_size), magic[6] == 1 ? 2 : 4);
  std::string header(header_size, ' ');
  file.read(header.data(), header_size);
  const size_t descr = header.find("'descr': '") + 10;
  const auto type = kTypes.find(header.substr(descr, header.find('\'', descr) - descr));
  if (type == kTypes.end() || header.find("'fortran_order': True") != std::string::npos)
    throw std::runtime_error(path + ": unsupported dtype or Fortran order");
  Array array{type->second, {}, {}};
  std::stringstream dims(header.substr(header.find('(') + 1, header.find(')') - header.find('(') - 1));
  for (std::string dim; std::getline(dims, dim, ',');)
    if (dim.find_first_not_of(' ') != std::string::npos) array.shape.push_back(std::stoll(dim));
  array.bytes.assign(std::istreambuf_iterator<char>(file), {});
  return array;
}

void write_npy(const std::string& path, const Ort::Value& value) {
  const Ort::TensorTypeAndShapeInfo info = value.GetTensorTypeAndShapeInfo();
  std::string descr;
  for (const auto& [code, type] : kTypes)
    if (type == info.GetElementType()) descr = code;
  if (descr.empty()) throw std::runtime_error(path + ": unsupported output type");
  std::string shape;
  for (int64_t dim : info.GetShape()) shape += std::to_string(dim) + ", ";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.resize(((header.size() + 11) / 64 + 1) * 64 - 11, ' ');  // magic + header: a multiple of 64
  header += '\n';
  const uint16_t size = static_cast<uint16_t>(header.size());
  std::ofstream file(path, std::ios::binary);
  file.write("\x93NUMPY\x01\x00", 8);
  file.write(reinterpret_cast<const char*>(&size), 2);
  file << header;
  const size_t bytes = info.GetElementCount() * (descr[2] - '0');
  file.write(static_cast<const char*>(value.GetTensorRawData()), static_cast<std::streamsize>(bytes));
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr,
                 "usage: host MODEL.onnx LIBRARY.so DIR\n"
                 "  DIR holds one <input name>.npy per model input; each output is written\n"
                 "  to DIR/<output name>.npy (the README gives the command for this project)\n");
    return 2;
  }
  try {
    Ort::Env env(ORT_LOGGING_LEVEL_WARNING, "host");  // one per process, outlives the session
    Ort::SessionOptions options;
    options.SetIntraOpNumThreads(1);
    options.RegisterCustomOpsLibrary(argv[2]);  // before the session: it needs our op to load the model
    Ort::Session session(env, argv[1], options);
    const std::string dir = argv[3];

    Ort::AllocatorWithDefaultOptions allocator;
    std::vector<std::string> input_names, output_names;
    for (size_t i = 0; i < session.GetInputCount(); ++i)
      input_names.push_back(session.GetInputNameAllocated(i, allocator).get());
    for (size_t i = 0; i < session.GetOutputCount(); ++i)
      output_names.push_back(session.GetOutputNameAllocated(i, allocator).get());

    // Tensors over our own buffers (no copy: the arrays outlive Run).
    std::vector<Array> arrays;
    for (const std::string& name : input_names) arrays.push_back(read_npy(dir + "/" + name + ".npy"));
    const Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    std::vector<Ort::Value> inputs;
    for (Array& a : arrays)
      inputs.push_back(Ort::Value::CreateTensor(cpu, a.bytes.data(), a.bytes.size(), a.shape.data(),
                                                a.shape.size(), a.type));
    std::vector<const char*> in, out;
    for (const std::string& name : input_names) in.push_back(name.c_str());
    for (const std::string& name : output_names) out.push_back(name.c_str());
    std::vector<Ort::Value> outputs =
        session.Run(Ort::RunOptions{nullptr}, in.data(), inputs.data(), in.size(), out.data(), out.size());
    for (size_t i = 0; i < outputs.size(); ++i) write_npy(dir + "/" + output_names[i] + ".npy", outputs[i]);
    return 0;
  } catch (const std::exception& e) {  // every failing Ort:: call throws an Ort::Exception
    std::fprintf(stderr, "host: %s\n", e.what());
    return 1;
  }
}
