// A small GEMM for the convolution kernels: C = A * B + bias (per column).
//
//   A: row-major m x k (row stride lda), read as is: the rows are output
//      pixels, which the caller writes into A one contiguous row at a time;
//   B: pre-packed into panels of NR columns (the output channels): panel q
//      holds columns [q * NR, q * NR + NR) as k rows of NR values
//      (element (p, j) at q * k * NR + p * NR + j - q * NR), zero-padded
//      past n.  The bias is padded likewise to whole panels;
//   C: element (i, j) at c[i * c_row + j * c_col], any strides (NCHW output:
//      pixels are rows with c_row = 1, channels columns with c_col = plane).
//
// The micro-kernel keeps an MR x NR block of C in registers for all of k:
// per step it loads NV vectors of B, broadcasts MR values of A and does
// MR * NV multiply-adds.  It is a template compiled once per instruction set
// (see simd.h); call gemm<T, I>() only from a function built for I.
#pragma once

#include <algorithm>
#include <cstdint>

#include "simd.h"

namespace customops {

// Register blocking per scalar type and instruction set: MR * NV
// accumulators, NV vectors of B and one broadcast must fit the register file
// (16 registers below AVX-512, 32 with it).
template <typename T, Isa I>
struct GemmShape {
  static constexpr int W = vector_bytes(I) / sizeof(T);  // values per vector
  static constexpr int MR = I == Isa::kAvx512 ? 12 : I == Isa::kAvx2 ? 6 : 4;
  static constexpr int NV = 2;
  static constexpr int NR = NV * W;
};

// Values of a packed B (or padded bias with k = 1) of n columns in panels of nr.
inline int64_t gemm_packed_size(int64_t n, int64_t k, int64_t nr) {
  return (n + nr - 1) / nr * nr * k;
}

// The MR x NR block of A rows a[0..rows) times one panel of B, written
// row-major to tile (rows past `rows` repeat the last row and are ignored).
// Element (i, p) of A is a[i * lda + p * step]: step 1 for a row-major A,
// lda 1 for a column-major one.
template <typename T, int MR, int NV, int W>
__attribute__((always_inline)) inline void gemm_micro_kernel(
    int64_t k, const T* a, int64_t lda, int64_t rows, const T* __restrict b,
    const T* bias, T* __restrict tile, int64_t step = 1) {
  const T* row[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) row[i] = a + std::min<int64_t>(i, rows - 1) * lda;
  Vec<T, W> acc[MR][NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    Vec<T, W> init = {};
    if (bias) load<T, W>(init, bias + v * W);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) acc[i][v] = init;
  }
  for (int64_t p = 0; p < k; ++p, b += NV * W) {
    Vec<T, W> bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) load<T, W>(bv[v], b + v * W);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const T ai = row[i][p * step];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store<T, W>(tile + i * NV * W + v * W, acc[i][v]);
}

// C (m x n) = A * packed B + bias; bias (padded to whole panels) may be null.
// B panels outermost: one panel stays in cache while the rows of A stream
// past it.
template <typename T, Isa I>
__attribute__((always_inline)) inline void gemm(
    int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* packed_b,
    const T* bias, T* c, int64_t c_row, int64_t c_col) {
  using S = GemmShape<T, I>;
  for (int64_t j0 = 0; j0 < n; j0 += S::NR) {
    const int64_t cols = std::min<int64_t>(S::NR, n - j0);
    for (int64_t i0 = 0; i0 < m; i0 += S::MR) {
      const int64_t rows = std::min<int64_t>(S::MR, m - i0);
      T tile[S::MR * S::NR];
      gemm_micro_kernel<T, S::MR, S::NV, S::W>(k, a + i0 * lda, lda, rows, packed_b + j0 * k,
                                               bias ? bias + j0 : nullptr, tile);
      T* block = c + i0 * c_row + j0 * c_col;
      // Row-major C (the backward's G, where k = O/groups is short): whole
      // vectors per row; the scalar copy below made that GEMM 15% slower.
      if (c_col == 1 && cols == S::NR)
        for (int64_t i = 0; i < rows; ++i) std::copy_n(tile + i * S::NR, S::NR, block + i * c_row);
      else
        for (int64_t j = 0; j < cols; ++j)
          for (int64_t i = 0; i < rows; ++i) block[i * c_row + j * c_col] = tile[i * S::NR + j];
    }
  }
}

}  // namespace customops
