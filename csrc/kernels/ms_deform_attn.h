// Multi-scale deformable attention (Deformable DETR's MSDeformAttnFunction,
// mmcv's MultiScaleDeformableAttnFunction) in float32, float64 or float16
// (computed in float32, rounded once).
//
// Contract (identical in PyTorch and ONNX Runtime):
//   value               (N, S, M, D)        S = sum of H_l * W_l over the levels
//   spatial_shapes      int64 (L, 2)        (H_l, W_l) of each level
//   level_start_index   int64 (L)           where each level starts in S: the
//                                           prefix sums of the areas H_l * W_l
//   sampling_locations  (N, Q, M, L, P, 2)  (x, y) in [0, 1] of each level
//   attention_weights   (N, Q, M, L, P)
//   output              (N, Q, M * D)
// output[n, q, m*D + d] = sum over l, p of attention_weights[n, q, m, l, p] *
// the bilinear sample of value[n, level l, m, d] at pixel (x * W_l - 0.5,
// y * H_l - 0.5): grid_sample with align_corners=False and zeros padding, so
// corners outside the level read zero, and a location outside [0, 1] gives
// a partial sample or zero.  Every location must be finite (a NaN or
// infinite one is refused, naming the first): a non-finite location has no
// pixel, and grid_sample's answer for it (zero) would hide an upstream bug.
// im2col_step must be >= 1 and changes nothing: in mmcv it is how many images
// the CUDA kernel's im2col buffer takes at a time.
#pragma once

#include <cstdint>

#include "half.h"
#include "parallel.h"
#include "shape.h"

namespace customops {

struct MsDeformAttnParams {
  int64_t batch, spatial, heads, channels;  // N, S, M, D
  int64_t queries, levels, points;          // Q, L, P
};

// Checks the shapes and im2col_step (what a fake tensor has) and returns the
// sizes; throws std::invalid_argument naming the bad argument.
MsDeformAttnParams ms_deform_attn_check_shapes(const Shape& value,
                                               const Shape& spatial_shapes,
                                               const Shape& level_start_index,
                                               const Shape& sampling_locations,
                                               const Shape& attention_weights,
                                               int64_t im2col_step);

// ms_deform_attn_check_shapes, then the values of spatial_shapes (>= 0, areas
// summing to S) and level_start_index (their prefix sums).
MsDeformAttnParams ms_deform_attn_check(const Shape& value, const Shape& spatial_shapes,
                                        const Shape& level_start_index,
                                        const Shape& sampling_locations,
                                        const Shape& attention_weights, int64_t im2col_step,
                                        const int64_t* spatial_shapes_data,
                                        const int64_t* level_start_index_data);

// Writes output (N, Q, M * D).  Call ms_deform_attn_check first.  Throws
// std::invalid_argument when a sampling location is NaN or infinite (the
// output is then partly written; neither binding returns it).
void ms_deform_attn(const float* value, const int64_t* spatial_shapes,
                    const int64_t* level_start_index, const float* sampling_locations,
                    const float* attention_weights, const MsDeformAttnParams& p, float* output,
                    const ParallelFor& parallel_for);
void ms_deform_attn(const double* value, const int64_t* spatial_shapes,
                    const int64_t* level_start_index, const double* sampling_locations,
                    const double* attention_weights, const MsDeformAttnParams& p,
                    double* output, const ParallelFor& parallel_for);
void ms_deform_attn(const Half* value, const int64_t* spatial_shapes,
                    const int64_t* level_start_index, const Half* sampling_locations,
                    const Half* attention_weights, const MsDeformAttnParams& p, Half* output,
                    const ParallelFor& parallel_for);

// The gradients of the output with respect to value, sampling_locations and
// attention_weights (each of its input's shape, overwritten), given
// grad_output (N, Q, M * D), as mmcv computes them.  Throws
// std::invalid_argument, before writing anything, when a sampling location
// is NaN or infinite.  Deterministic: the same
// bits for any thread count (each (n, m) pair is one task that owns its
// slices of every gradient).  Call ms_deform_attn_check first.
void ms_deform_attn_backward(const float* grad_output, const float* value,
                             const int64_t* spatial_shapes, const int64_t* level_start_index,
                             const float* sampling_locations, const float* attention_weights,
                             const MsDeformAttnParams& p, float* grad_value,
                             float* grad_sampling_locations, float* grad_attention_weights,
                             const ParallelFor& parallel_for);
void ms_deform_attn_backward(const double* grad_output, const double* value,
                             const int64_t* spatial_shapes, const int64_t* level_start_index,
                             const double* sampling_locations, const double* attention_weights,
                             const MsDeformAttnParams& p, double* grad_value,
                             double* grad_sampling_locations, double* grad_attention_weights,
                             const ParallelFor& parallel_for);
void ms_deform_attn_backward(const Half* grad_output, const Half* value,
                             const int64_t* spatial_shapes, const int64_t* level_start_index,
                             const Half* sampling_locations, const Half* attention_weights,
                             const MsDeformAttnParams& p, Half* grad_value,
                             Half* grad_sampling_locations, Half* grad_attention_weights,
                             const ParallelFor& parallel_for);

}  // namespace customops
