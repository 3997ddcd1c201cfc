// run_model: runs an ONNX model with ONNX Runtime's C++ API, no Python.
//
//   run_model [--library LIB]... [--builtin] MODEL.onnx NAME=FILE.npy ... --out DIR
//
// Reads each input from a .npy file, runs the model on the CPU, writes every
// output to DIR/<output name>.npy and prints its name, dtype and shape.  An
// output name that is not a plain file name ("a/b") has its other characters
// replaced by '_'; when two outputs would then share a file ("a/b" and "a_b"),
// the later one gets a numbered name ("a_b-2.npy").  Either way the printed
// line ends with "-> FILE.npy" where the file is not <output name>.npy.
// Custom ops come from shared libraries (--library, any number, loaded with
// RegisterCustomOpsLibrary) or from the ops compiled into this program
// (--builtin, added with Ort::CustomOpDomain).  Every error is one line on
// stderr and exit status 1 (2 for a wrong command line).

// The built-in ops are compiled from the plugin library's sources, which
// initialise the C++ API by hand; every file of a program must agree on it.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "builtin_ops.h"
#include "npy.h"

namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char kUsage[] =
    "usage: run_model [--library LIB]... [--builtin] MODEL.onnx NAME=FILE.npy ... --out DIR";

struct Arguments {
  std::vector<std::string> libraries;
  bool builtin = false;
  std::string model, out;
  std::vector<std::pair<std::string, std::string>> inputs;  // name, .npy path
};

Arguments parse(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--library" || arg == "--out") {
      if (!has_value) throw UsageError(arg + " needs a value");
      (arg == "--out" ? args.out : args.libraries.emplace_back()) = argv[++i];
    } else if (arg == "--builtin") {
      args.builtin = true;
    } else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage << "\n";
      std::exit(0);
    } else if (arg.rfind("--", 0) == 0) {
      throw UsageError("unknown option " + arg);
    } else if (args.model.empty()) {
      args.model = arg;
    } else {
      const size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
        throw UsageError("expected an input as NAME=FILE.npy, got '" + arg + "'");
      args.inputs.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
    }
  }
  if (args.model.empty()) throw UsageError("no model given");
  if (args.out.empty()) throw UsageError("no output directory given (--out DIR)");
  return args;
}

// ONNX element types and their NumPy names (the ones .npy can hold).
const std::map<ONNXTensorElementDataType, std::string>& dtype_names() {
  static const std::map<ONNXTensorElementDataType, std::string> names{
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16, "float16"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, "float32"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE, "float64"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8, "int8"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16, "int16"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, "int32"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, "int64"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, "uint8"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16, "uint16"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32, "uint32"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64, "uint64"},
      {ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL, "bool"}};
  return names;
}

std::string dtype_name(ONNXTensorElementDataType type) {
  const auto found = dtype_names().find(type);
  return found == dtype_names().end() ? "ONNX element type " + std::to_string(type)
                                      : found->second;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + (shape[i] < 0 ? std::string("?") : std::to_string(shape[i]));
  return text + (shape.size() == 1 ? ",)" : ")");
}

// What the model expects of one input.
struct InputSpec {
  std::string name;
  ONNXTensorElementDataType type;
  std::vector<int64_t> shape;  // -1 for a dimension of any size
};

std::vector<InputSpec> input_specs(const Ort::Session& session) {
  Ort::AllocatorWithDefaultOptions allocator;
  std::vector<InputSpec> specs;
  for (size_t i = 0; i < session.GetInputCount(); ++i) {
    const std::string name = session.GetInputNameAllocated(i, allocator).get();
    const Ort::TypeInfo info = session.GetInputTypeInfo(i);
    if (info.GetONNXType() != ONNX_TYPE_TENSOR)
      throw Error("input '" + name + "' is not a tensor (sequences and maps are not supported)");
    const auto tensor = info.GetTensorTypeAndShapeInfo();
    specs.push_back({name, tensor.GetElementType(), tensor.GetShape()});
  }
  return specs;
}

// Checks an array against what the model expects and copies it into a tensor.
Ort::Value make_input(const InputSpec& spec, const npy::Array& array, const std::string& path) {
  const std::string expected = dtype_name(spec.type);
  if (array.dtype != expected)
    throw Error("input '" + spec.name + "' expects " + expected + ", " + path + " holds " +
                array.dtype);
  bool fits = array.shape.size() == spec.shape.size();
  for (size_t d = 0; fits && d < spec.shape.size(); ++d)
    fits = spec.shape[d] < 0 || spec.shape[d] == array.shape[d];
  if (!fits)
    throw Error("input '" + spec.name + "' expects shape " + shape_text(spec.shape) + " (rank " +
                std::to_string(spec.shape.size()) + "), " + path + " has shape " +
                shape_text(array.shape));
  Ort::AllocatorWithDefaultOptions allocator;
  Ort::Value value =
      Ort::Value::CreateTensor(allocator, array.shape.data(), array.shape.size(), spec.type);
  std::copy(array.data.begin(), array.data.end(),
            static_cast<char*>(value.GetTensorMutableRawData()));
  return value;
}

// An output's file name: the output name with anything but letters, digits,
// '.', '-' and '_' replaced, so that no name can leave the directory.
std::string file_name(const std::string& output) {
  std::string name = output;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  if (name.empty() || name == "." || name == "..") name = "_" + name;
  return name + ".npy";
}

// One file name per output, all distinct: the first output with a given
// file_name keeps it, later ones get "-2", "-3", ... (skipping any name some
// output has anyway), so no output overwrites another.
std::vector<std::string> file_names(const std::vector<std::string>& outputs) {
  std::vector<std::string> names;
  std::set<std::string> plain, taken;
  for (const std::string& output : outputs) plain.insert(file_name(output));
  for (const std::string& output : outputs) {
    std::string name = file_name(output);
    if (taken.count(name)) {
      const std::string stem = name.substr(0, name.size() - 4);  // without ".npy"
      int k = 2;
      do {
        name = stem + "-" + std::to_string(k++) + ".npy";
      } while (taken.count(name) || plain.count(name));
    }
    taken.insert(name);
    names.push_back(name);
  }
  return names;
}

void prepare_out_dir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error || !std::filesystem::is_directory(dir))
    throw Error("cannot use output directory " + dir + ": " +
                (error ? error.message() : "not a directory"));
}

// ORT's messages may span lines; ours are one line.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

int run(const Arguments& args) {
  const OrtApi* api = OrtGetApiBase()->GetApi(ORT_API_VERSION);
  if (api == nullptr)
    throw Error(std::string("this onnxruntime (") + OrtGetApiBase()->GetVersionString() +
                ") is older than the headers run_model was built with (API " +
                std::to_string(ORT_API_VERSION) + ")");
  Ort::InitApi(api);

  // Errors are reported once, from the exceptions below; ORT's log stays quiet.
  Ort::Env env(ORT_LOGGING_LEVEL_FATAL, "run_model");
  Ort::SessionOptions options;
  for (const std::string& library : args.libraries) {
    if (!std::filesystem::is_regular_file(library))
      throw Error("custom-op library not found: " + library);
    try {
      options.RegisterCustomOpsLibrary(library.c_str());
    } catch (const Ort::Exception& e) {
      throw Error("cannot load custom-op library " + library + ": " + e.what());
    }
  }
  if (args.builtin) options.Add(builtin_ops());

  if (!std::filesystem::is_regular_file(args.model))
    throw Error("model not found: " + args.model);
  std::unique_ptr<Ort::Session> session;
  try {
    session = std::make_unique<Ort::Session>(env, args.model.c_str(), options);
  } catch (const Ort::Exception& e) {
    std::string message = "cannot load model " + args.model + ": " + e.what();
    if (message.find("is not a registered function/op") != std::string::npos)
      message += " (no registered library provides this op: pass the one that does with "
                 "--library, or --builtin)";
    throw Error(message);
  }

  const std::vector<InputSpec> specs = input_specs(*session);
  std::map<std::string, const InputSpec*> by_name;
  std::string expected_names;
  for (const InputSpec& spec : specs) {
    by_name[spec.name] = &spec;
    expected_names += (expected_names.empty() ? "" : ", ") + spec.name;
  }
  std::map<std::string, Ort::Value> feeds;
  for (const auto& [name, path] : args.inputs) {
    const auto found = by_name.find(name);
    if (found == by_name.end())
      throw Error("unknown input '" + name + "'; the model's inputs are: " + expected_names);
    if (feeds.count(name)) throw Error("input '" + name + "' given twice");
    feeds.emplace(name, make_input(*found->second, npy::load(path), path));
  }
  std::vector<const char*> input_names;
  std::vector<Ort::Value> input_values;
  for (const InputSpec& spec : specs) {
    const auto found = feeds.find(spec.name);
    if (found == feeds.end())
      throw Error("missing input '" + spec.name + "' (" + dtype_name(spec.type) + " " +
                  shape_text(spec.shape) + "): give it as " + spec.name + "=FILE.npy");
    input_names.push_back(spec.name.c_str());
    input_values.push_back(std::move(found->second));
  }

  Ort::AllocatorWithDefaultOptions allocator;
  std::vector<std::string> output_names;
  for (size_t i = 0; i < session->GetOutputCount(); ++i)
    output_names.push_back(session->GetOutputNameAllocated(i, allocator).get());
  std::vector<const char*> output_ptrs;
  for (const std::string& name : output_names) output_ptrs.push_back(name.c_str());

  const std::vector<std::string> files = file_names(output_names);
  prepare_out_dir(args.out);  // before running: a bad directory should not cost a run
  std::vector<Ort::Value> outputs;
  try {
    outputs = session->Run(Ort::RunOptions{nullptr}, input_names.data(), input_values.data(),
                           input_values.size(), output_ptrs.data(), output_ptrs.size());
  } catch (const Ort::Exception& e) {
    throw Error(std::string("run failed: ") + e.what());
  }

  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].IsTensor()) throw Error("output '" + output_names[i] + "' is not a tensor");
    const auto info = outputs[i].GetTensorTypeAndShapeInfo();
    npy::Array array;
    array.dtype = dtype_name(info.GetElementType());
    if (npy::item_size(array.dtype) == 0)
      throw Error("output '" + output_names[i] + "' has " + array.dtype +
                  ", which .npy cannot hold");
    array.shape = info.GetShape();
    const auto* data = static_cast<const char*>(outputs[i].GetTensorRawData());
    array.data.assign(data, data + info.GetElementCount() * npy::item_size(array.dtype));
    npy::save((std::filesystem::path(args.out) / files[i]).string(), array);
    std::cout << output_names[i] << ": " << array.dtype << " " << shape_text(array.shape)
              << (files[i] == output_names[i] + ".npy" ? "" : " -> " + files[i]) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const UsageError& e) {
    std::cerr << "run_model: error: " << e.what() << "\n" << kUsage << "\n";
    return 2;
  } catch (const std::exception& e) {  // ours, npy::Error, Ort::Exception
    std::cerr << "run_model: error: " << one_line(e.what()) << "\n";
    return 1;
  }
}
