// Scratch arrays that a kernel call takes over from the previous call on
// the same thread.
//
// Memory fresh from the allocator costs a page fault per 4 KiB page when it
// is first written, and glibc may hand blocks of megabytes back to the
// system on free (an mmap'ed block, the heap's trimmed top), so a kernel
// that allocates its buffers in every call pays the faults in every call.
// On a virtual machine one fault costs microseconds: the deform_conv2d
// backward allocating per call took up to 953 faults per call at 64x64 and
// 2,016 at 128x128 in a C++ driver, and with 4 MiB bands 2,026 faults and
// 5 ms more per call at 64x64 (18.9 ms against 13.7 ms with glibc told to keep
// its memory).  Each thread that calls a kernel therefore keeps its blocks
// for its next call (a grow-only scratchpad), up to kKeptBytes in all;
// larger ones are freed when the call ends (in each library that compiles
// the kernels: the PyTorch extension and the ORT library keep their own).
// Concurrent calls come from different threads, so they never share a block.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <vector>

#include "simd.h"

namespace customops {

class Scratch {
 public:
  // Blocks above this many bytes in all go back to the allocator at the end
  // of the call (a batch of large images), so a thread keeps at most this.
  static constexpr size_t kKeptBytes = size_t{64} << 20;

  // One Scratch per thread at a time: a kernel never calls another kernel.
  Scratch() {
    if (in_use()) throw std::logic_error("customops: a second Scratch on one thread");
    in_use() = true;
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    size_t total = 0;
    for (const Block& b : blocks()) total += b.bytes;
    if (total > kKeptBytes) blocks().clear();
    in_use() = false;
  }

  // The call's next array of n values, line-aligned, left uninitialized
  // (it holds whatever the previous call left there).
  template <typename T>
  T* array(size_t n) {
    std::vector<Block>& kept = blocks();
    if (next_ == kept.size()) kept.emplace_back();
    Block& b = kept[next_++];
    const size_t bytes = n * sizeof(T);
    if (b.bytes < bytes) {
      // Freed before allocating, so the old and new never coexist; emptied
      // first, so that a failed allocation leaves no size without memory.
      b.data.reset();
      b.bytes = 0;
      b.data = aligned_array<char>(bytes);
      b.bytes = bytes;
    }
    return reinterpret_cast<T*>(b.data.get());
  }

 private:
  struct Block {
    AlignedArray<char> data;
    size_t bytes = 0;
  };
  static std::vector<Block>& blocks() {
    thread_local std::vector<Block> kept;
    return kept;
  }
  static bool& in_use() {
    thread_local bool flag = false;
    return flag;
  }

  size_t next_ = 0;
};

}  // namespace customops
