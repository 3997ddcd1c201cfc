#include "gemm.h"

#include <algorithm>

namespace customops {
namespace {

// Inner-dimension block: a kc x nr sliver of B (16-32 KiB) stays in L1 while
// every A panel of the block streams past it from L2.
constexpr int64_t kMaxKc = 256;

// GCC vector extension: W floats that the compiler maps onto one register
// of the function's target (zmm, ymm or xmm); no intrinsics needed.
// (An alias template would silently drop the attribute, hence the struct.)
template <int W>
struct VecOf {
  typedef float type __attribute__((vector_size(W * sizeof(float))));
};
template <int W>
using Vec = typename VecOf<W>::type;

// Unaligned loads and stores.  Vectors travel by reference: passing wide
// vectors by value to a function compiled for another target changes the ABI.
template <int W>
__attribute__((always_inline)) inline void load(Vec<W>& v, const float* p) {
  __builtin_memcpy(&v, p, sizeof v);
}

template <int W>
__attribute__((always_inline)) inline void store(float* p, const Vec<W>& v) {
  __builtin_memcpy(p, &v, sizeof v);
}

// Computes one MR x (NV * W) block of C over kc steps of the inner dimension,
// keeping all MR * NV accumulators in registers: per step it loads NV vectors
// of B, broadcasts each of the MR values of A and does MR * NV multiply-adds
// (fused when the target has FMA).  The accumulators start from init_rows[i]
// (bias, first k block) or from C (later k blocks).  Plain scalar loops were
// tried first; GCC's vectorization of them is fragile and spilled
// accumulators depending on the surrounding code.
template <int MR, int NV, int W>
__attribute__((always_inline)) inline void micro_kernel(
    int64_t kc, const float* __restrict a, const float* __restrict b,
    float* __restrict c, int64_t ldc, const float* init_rows) {
  Vec<W> acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      if (init_rows)
        acc[i][v] = Vec<W>{} + init_rows[i];  // broadcast
      else
        load<W>(acc[i][v], c + i * ldc + v * W);
  for (int64_t p = 0; p < kc; ++p, a += MR, b += NV * W) {
    Vec<W> bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) load<W>(bv[v], b + v * W);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += a[i] * bv[v];
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store<W>(c + i * ldc + v * W, acc[i][v]);
}

// The blocked loop nest around the micro-kernel: k blocks outermost (so C is
// revisited once per block), then B panels, then A panels.
template <int MR, int NV, int W>
__attribute__((always_inline)) inline void gemm_blocked(
    int64_t m, int64_t n, int64_t k, const float* packed_a,
    const float* packed_b, const float* bias, float* c, int64_t ldc) {
  constexpr int NR = NV * W;
  const int64_t k_blocks = (k + kMaxKc - 1) / kMaxKc;
  const int64_t kc_size = (k + k_blocks - 1) / k_blocks;  // even split
  for (int64_t k0 = 0; k0 < k; k0 += kc_size) {
    const int64_t kc = std::min(kc_size, k - k0);
    for (int64_t j0 = 0; j0 < n; j0 += NR) {
      const float* b = packed_b + j0 * k + k0 * NR;
      const int64_t cols = std::min<int64_t>(NR, n - j0);
      for (int64_t i0 = 0; i0 < m; i0 += MR) {
        const float* a = packed_a + i0 * k + k0 * MR;
        const int64_t rows = std::min<int64_t>(MR, m - i0);
        float row_init[MR] = {};
        if (bias) std::copy(bias + i0, bias + i0 + rows, row_init);
        const float* init = k0 == 0 ? row_init : nullptr;
        // Edge blocks run the same kernel on a full-size local tile and copy
        // back only the rows and columns that exist.  One call site for both
        // cases: a second inlined copy of the kernel compiles to code that
        // spills its accumulators.
        float* block = c + i0 * ldc + j0;
        const bool edge = rows < MR || cols < NR;
        float tile[MR * NR];
        if (edge && !init) {
          std::fill(tile, tile + MR * NR, 0.0f);
          for (int64_t i = 0; i < rows; ++i)
            std::copy(block + i * ldc, block + i * ldc + cols, tile + i * NR);
        }
        micro_kernel<MR, NV, W>(kc, a, b, edge ? tile : block, edge ? NR : ldc,
                             init);
        if (edge)
          for (int64_t i = 0; i < rows; ++i)
            std::copy(tile + i * NR, tile + i * NR + cols, block + i * ldc);
      }
    }
  }
}

// One instantiation per instruction set.  Register budgets: AVX-512 has 32
// zmm registers (12 x 2 accumulators + B + broadcast), AVX2 16 ymm
// (6 x 2 + 2 + 1); the baseline (SSE2 on x86-64, NEON on ARM) uses
// 4 x 2 accumulators of 4 floats.
struct Variant {
  int64_t mr, nr;
  void (*run)(int64_t, int64_t, int64_t, const float*, const float*,
              const float*, float*, int64_t);
};

void gemm_baseline(int64_t m, int64_t n, int64_t k, const float* pa,
                   const float* pb, const float* bias, float* c, int64_t ldc) {
  gemm_blocked<4, 2, 4>(m, n, k, pa, pb, bias, c, ldc);
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f"))) void gemm_avx512(
    int64_t m, int64_t n, int64_t k, const float* pa, const float* pb,
    const float* bias, float* c, int64_t ldc) {
  gemm_blocked<12, 2, 16>(m, n, k, pa, pb, bias, c, ldc);
}

__attribute__((target("avx2,fma"))) void gemm_avx2(
    int64_t m, int64_t n, int64_t k, const float* pa, const float* pb,
    const float* bias, float* c, int64_t ldc) {
  gemm_blocked<6, 2, 8>(m, n, k, pa, pb, bias, c, ldc);
}
#endif

// Picked once per process from what the CPU reports.
const Variant& selected_variant() {
  static const Variant variant = [] {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return Variant{12, 32, gemm_avx512};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return Variant{6, 16, gemm_avx2};
#endif
    return Variant{4, 8, gemm_baseline};
  }();
  return variant;
}

}  // namespace

GemmBlocking gemm_blocking() {
  const Variant& v = selected_variant();
  return {v.mr, v.nr};
}

void gemm_pack_a(const float* a, int64_t lda, int64_t m, int64_t k, int64_t mr,
                 float* packed) {
  for (int64_t i0 = 0; i0 < m; i0 += mr, packed += mr * k) {
    const int64_t rows = std::min(mr, m - i0);
    for (int64_t p = 0; p < k; ++p)
      for (int64_t i = 0; i < mr; ++i)
        packed[p * mr + i] = i < rows ? a[(i0 + i) * lda + p] : 0.0f;
  }
}

void gemm_packed(int64_t m, int64_t n, int64_t k, const float* packed_a,
                 const float* packed_b, const float* bias, float* c,
                 int64_t ldc) {
  selected_variant().run(m, n, k, packed_a, packed_b, bias, c, ldc);
}

}  // namespace customops
