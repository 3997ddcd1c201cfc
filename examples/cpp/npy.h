// A small, strict reader and writer of NumPy's .npy format (version 1.0 to
// 3.0): little-endian or byte-order-free numbers and bool, C order.  Anything
// else (big-endian, Fortran order, object or structured dtypes, a file whose
// size does not match its header) is refused with a message naming the file.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace npy {

struct Array {
  std::string dtype;           // NumPy's name: "float32", "int64", "bool", ...
  std::vector<int64_t> shape;  // empty for a scalar
  std::vector<char> data;      // C order, little endian
};

// Every error of this file: the message is one line, starting with the path.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The dtypes this file reads and writes, by NumPy name, with their size.
size_t item_size(const std::string& dtype);  // 0 for an unsupported dtype

Array load(const std::string& path);
void save(const std::string& path, const Array& array);

}  // namespace npy
