// Short vectors and the instruction set the kernels run with.
//
// The library is built without -march flags, so it loads on any x86-64 (or
// ARM) CPU.  Hot loops are written once, as templates over GCC's vector
// extension (Vec<T, W>: W values of T in one register, no intrinsics), and
// compiled several times inside functions marked
// __attribute__((target(...))); selected_isa() says which copy to call.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>

namespace customops {

// (An alias template would silently drop the attribute, hence the struct.)
template <typename T, int W>
struct VecOf {
  typedef T type __attribute__((vector_size(W * sizeof(T))));
};
template <typename T, int W>
using Vec = typename VecOf<T, W>::type;

// Unaligned loads and stores.  Vectors travel by reference: passing wide
// vectors by value to a function compiled for another target changes the ABI.
template <typename T, int W>
__attribute__((always_inline)) inline void load(Vec<T, W>& v, const T* p) {
  std::memcpy(&v, p, sizeof v);
}

template <typename T, int W>
__attribute__((always_inline)) inline void store(T* p, const Vec<T, W>& v) {
  std::memcpy(p, &v, sizeof v);
}

// Loads W values of T as a vector of U, e.g. floats widened to doubles.
// Element by element, because GCC 12 compiles __builtin_convertvector of a
// loaded float vector into two half-width conversions and a blend; this form
// becomes one conversion from memory.
template <typename T, typename U, int W>
__attribute__((always_inline)) inline void load_as(Vec<U, W>& v, const T* p) {
  for (int l = 0; l < W; ++l) v[l] = static_cast<U>(p[l]);
}

// The sum of the W lanes of v, by halves (log2 W dependent adds, where a
// lane-by-lane sum is a chain of W - 1).
template <typename T, int W>
__attribute__((always_inline)) inline T reduce_add(const Vec<T, W>& v) {
  if constexpr (W == 2) {
    return v[0] + v[1];
  } else {
    Vec<T, W / 2> low, high;
    std::memcpy(&low, &v, sizeof low);
    std::memcpy(&high, reinterpret_cast<const char*>(&v) + sizeof low, sizeof high);
    return reduce_add<T, W / 2>(low + high);
  }
}

// Arrays the vector loops read and write start on a cache line.  A run of
// channels that starts at a multiple of 64 bytes into them then never
// straddles two lines.  With 64-byte vectors (AVX-512) every load and store of
// a run in memory aligned to only 16 bytes (what new[] guarantees) would
// straddle two lines.  Left uninitialized, as new T[n].
constexpr std::align_val_t kLineAlignment{64};

struct AlignedDelete {
  void operator()(void* p) const { ::operator delete[](p, kLineAlignment); }
};
template <typename T>
using AlignedArray = std::unique_ptr<T[], AlignedDelete>;

template <typename T>
AlignedArray<T> aligned_array(size_t n) {
  return AlignedArray<T>(static_cast<T*>(::operator new[](n * sizeof(T), kLineAlignment)));
}

// kBaseline is what every CPU of the architecture has: SSE2 on x86-64, NEON
// on 64-bit ARM (16-byte vectors).  kAvx2 includes FMA.
enum class Isa { kBaseline, kAvx2, kAvx512 };

// Bytes per vector register.
constexpr int vector_bytes(Isa isa) {
  return isa == Isa::kAvx512 ? 64 : isa == Isa::kAvx2 ? 32 : 16;
}

// The best instruction set of the running CPU, chosen once per process.  The
// environment variable CUSTOMOPS_ISA=baseline|avx2|avx512 caps it, so tests
// can run the portable code on any CPU; it never raises it above what the
// CPU has.
inline Isa selected_isa() {
  static const Isa isa = [] {
    Isa best = Isa::kBaseline;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::kAvx2;
    if (__builtin_cpu_supports("avx512f")) best = Isa::kAvx512;
#endif
    const char* env = std::getenv("CUSTOMOPS_ISA");
    const std::string_view cap = env ? env : "";
    if (cap == "baseline") return Isa::kBaseline;
    if (cap == "avx2" && best == Isa::kAvx512) return Isa::kAvx2;
    return best;
  }();
  return isa;
}

}  // namespace customops
