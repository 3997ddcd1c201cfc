// A small packed single-precision GEMM for the convolution kernels.
//
// C = A * B (+ bias per row) with both operands pre-packed into the panel
// layouts the register-blocked micro-kernel reads sequentially:
//
//   packed A: ceil(m / mr) panels, each k x mr floats (row i of the panel's
//             mr rows at offset kk * mr + i), zero-padded to whole panels;
//   packed B: ceil(n / nr) panels, each k x nr floats (column j of the
//             panel's nr columns at offset kk * nr + j), zero-padded
//             likewise (columns past n only feed discarded results).
//
// The micro-kernel is compiled several times (AVX-512, AVX2+FMA, and a
// baseline: SSE2 on x86-64, NEON on ARM) and the best one for the running
// CPU is picked once, so the library needs no -march flag.  mr and nr depend
// on that choice: always pack with the values gemm_blocking() returns.  All
// functions are thread-safe.
#pragma once

#include <cstdint>

namespace customops {

struct GemmBlocking {
  int64_t mr;  // rows of A per panel
  int64_t nr;  // columns of B per panel
};

// The panel sizes of the micro-kernel selected for this CPU.
GemmBlocking gemm_blocking();

// Floats needed by a packed operand with `rows` rows (A) or columns (B) in
// panels of `panel` and inner dimension k.
inline int64_t gemm_packed_size(int64_t rows, int64_t k, int64_t panel) {
  return (rows + panel - 1) / panel * panel * k;
}

// Packs the row-major m x k matrix a (row stride lda) into the packed A
// layout for panels of mr rows.
void gemm_pack_a(const float* a, int64_t lda, int64_t m, int64_t k, int64_t mr,
                 float* packed);

// c (m x n, row stride ldc) = packed_a * packed_b + bias[row]; bias may be
// null.  Both operands must be packed with gemm_blocking()'s mr and nr.
void gemm_packed(int64_t m, int64_t n, int64_t k, const float* packed_a,
                 const float* packed_b, const float* bias, float* c,
                 int64_t ldc);

}  // namespace customops
