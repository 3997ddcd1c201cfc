#include "npy.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>

namespace npy {
namespace {

// NumPy's descr string of each supported dtype, as np.save writes it.
const std::map<std::string, std::pair<std::string, size_t>>& descrs() {
  static const std::map<std::string, std::pair<std::string, size_t>> table{
      {"<f2", {"float16", 2}}, {"<f4", {"float32", 4}}, {"<f8", {"float64", 8}},
      {"|i1", {"int8", 1}},    {"<i2", {"int16", 2}},   {"<i4", {"int32", 4}},
      {"<i8", {"int64", 8}},   {"|u1", {"uint8", 1}},   {"<u2", {"uint16", 2}},
      {"<u4", {"uint32", 4}},  {"<u8", {"uint64", 8}},  {"|b1", {"bool", 1}}};
  return table;
}

std::string descr_of(const std::string& dtype) {
  for (const auto& [descr, entry] : descrs())
    if (entry.first == dtype) return descr;
  return "";
}

const char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

// Parses the header, a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// accepting exactly the three keys np.save writes, in any order.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  void parse(std::string& descr, bool& fortran, std::vector<int64_t>& shape) {
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = quoted();
      expect(':');
      if (key == "descr" && !seen_descr) {
        descr = quoted();
        seen_descr = true;
      } else if (key == "fortran_order" && !seen_fortran) {
        fortran = boolean();
        seen_fortran = true;
      } else if (key == "shape" && !seen_shape) {
        shape = tuple();
        seen_shape = true;
      } else {
        fail("unexpected or repeated key '" + key + "'");
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (pos_ != s_.size()) fail("trailing characters after the header");
    if (!seen_descr || !seen_fortran || !seen_shape)
      fail("the header needs the keys descr, fortran_order and shape");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(path_ + ": not a valid .npy header (" + what + ")");
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool peek(char c) {
    skip_space();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string quoted() {
    skip_space();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) fail("expected a string");
    const char quote = s_[pos_++];
    const size_t end = s_.find(quote, pos_);
    if (end == std::string::npos) fail("unterminated string");
    std::string value = s_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (s_.compare(pos_, std::strlen(word), word) == 0) {
        pos_ += std::strlen(word);
        return value;
      }
    }
    fail("fortran_order must be True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    while (!peek(')')) {
      skip_space();
      int64_t dim = 0;
      const size_t start = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        if (dim > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("dimension too large");
        dim = dim * 10 + (s_[pos_++] - '0');
      }
      if (pos_ == start) fail("shape must be a tuple of non-negative integers");
      dims.push_back(dim);
      if (!peek(')')) expect(',');
    }
    expect(')');
    return dims;
  }

  const std::string& s_;
  const std::string& path_;
  size_t pos_ = 0;
};

uint32_t little_endian(const unsigned char* p, size_t bytes) {
  uint32_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint32_t>(p[i]) << (8 * i);
  return value;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

size_t item_size(const std::string& dtype) {
  const std::string descr = descr_of(dtype);
  return descr.empty() ? 0 : descrs().at(descr).second;
}

Array load(const std::string& path) {
  // A directory opens as a stream on Linux, and reading it throws
  // basic_filebuf's own message, without the path.
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored))
    throw Error(path + ": is a directory, not a .npy file");
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  std::string bytes;
  try {
    bytes.assign(std::istreambuf_iterator<char>(file), {});
  } catch (const std::exception& e) {
    throw Error(path + ": cannot read (" + e.what() + ")");
  }
  if (file.bad()) throw Error(path + ": cannot read");
  const auto* raw = reinterpret_cast<const unsigned char*>(bytes.data());

  if (bytes.size() < kMagicSize + 4 || bytes.compare(0, kMagicSize, kMagic) != 0)
    throw Error(path + ": not a .npy file (no \\x93NUMPY magic)");
  const int major = raw[6];
  if (major < 1 || major > 3)
    throw Error(path + ": unsupported .npy version " + std::to_string(major));
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t header_start = 8 + length_bytes;
  if (bytes.size() < header_start) throw Error(path + ": truncated .npy header");
  const size_t header_size = little_endian(raw + 8, length_bytes);
  if (bytes.size() - header_start < header_size) throw Error(path + ": truncated .npy header");

  std::string descr;
  bool fortran = false;
  Array array;
  HeaderParser(bytes.substr(header_start, header_size), path).parse(descr, fortran, array.shape);

  const auto found = descrs().find(descr);
  if (found == descrs().end())
    throw Error(path + ": unsupported dtype '" + descr +
                "' (little-endian float16/32/64, int8-64, uint8-64 or bool only)");
  if (fortran)
    throw Error(path + ": Fortran-order arrays are not supported (save a C-order array: "
                "np.save(path, np.ascontiguousarray(a)))");
  array.dtype = found->second.first;

  // The data must be exactly what the header promises: no less, no more.
  const size_t item = found->second.second;
  uint64_t count = 1;
  for (const int64_t dim : array.shape) {
    if (dim != 0 && count > std::numeric_limits<uint64_t>::max() / item / dim)
      throw Error(path + ": shape " + shape_text(array.shape) + " is too large");
    count *= static_cast<uint64_t>(dim);
  }
  const size_t data_start = header_start + header_size;
  const uint64_t available = bytes.size() - data_start;
  if (available != count * item)
    throw Error(path + ": holds " + std::to_string(available) + " data bytes, its header (" +
                array.dtype + " " + shape_text(array.shape) + ") says " +
                std::to_string(count * item));
  array.data.assign(bytes.begin() + data_start, bytes.end());
  if (array.dtype == "bool")
    for (const char byte : array.data)
      if (byte != 0 && byte != 1) throw Error(path + ": bool data holds a byte other than 0 or 1");
  return array;
}

void save(const std::string& path, const Array& array) {
  const std::string descr = descr_of(array.dtype);
  if (descr.empty()) throw Error(path + ": cannot save dtype " + array.dtype);
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " +
                       shape_text(array.shape) + ", }";
  // Version 1.0: magic, 2 version bytes, 2 length bytes, then the header
  // padded with spaces and ended by '\n' so the data starts 64-byte aligned.
  const size_t prefix = kMagicSize + 4;
  header.append(63 - (prefix + header.size()) % 64, ' ');
  header += '\n';
  if (header.size() > 0xffff) throw Error(path + ": shape has too many dimensions for .npy 1.0");
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw Error(path + ": cannot write (" + std::strerror(errno) + ")");
  const unsigned char lengths[4] = {1, 0, static_cast<unsigned char>(header.size() & 0xff),
                                    static_cast<unsigned char>(header.size() >> 8)};
  file.write(kMagic, kMagicSize);
  file.write(reinterpret_cast<const char*>(lengths), 4);
  file << header;
  file.write(array.data.data(), static_cast<std::streamsize>(array.data.size()));
  if (!file.flush()) throw Error(path + ": write failed (" + std::strerror(errno) + ")");
}

}  // namespace npy
