// Deformable convolution (v1 without mask, v2 with mask), NCHW, in float32,
// float64 or float16 (computed in float32, rounded once).
//
// The arguments follow torchvision's C++ schema: input (N, C, H, W),
// weight (O, C/groups, kh, kw), offset (N, 2*offset_groups*kh*kw, oh, ow),
// optional mask (N, offset_groups*kh*kw, oh, ow), optional bias (O).
// offset holds (dy, dx) pairs: channel 2*(g*kh*kw + i*kw + j) is dy and the
// next one dx for offset group g and kernel tap (i, j).  Samples outside the
// input read zero through bilinear interpolation, as in torchvision and ONNX
// DeformConv.  The output is (N, O, oh, ow).
#pragma once

#include <cstdint>

#include "half.h"
#include "parallel.h"
#include "shape.h"

namespace customops {

struct DeformConv2dParams {
  int64_t batch, in_channels, height, width;
  int64_t out_channels, kernel_h, kernel_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t groups, offset_groups;
  int64_t out_h, out_w;
};

// Checks every shape and attribute (channel and group arithmetic, kernel size
// against the padded input) and returns the resolved parameters; throws
// std::invalid_argument naming the bad argument.  mask_shape and bias_shape
// are empty when absent.  stride, padding and dilation are (h, w) pairs.
DeformConv2dParams deform_conv2d_check(
    const Shape& input_shape, const Shape& weight_shape,
    const Shape& offset_shape, const OptionalShape& mask_shape,
    const OptionalShape& bias_shape,
    const Shape& stride, const Shape& padding, const Shape& dilation,
    int64_t groups, int64_t offset_groups);

// Writes output (batch, out_channels, out_h, out_w).  mask and bias may be
// null.  Call deform_conv2d_check first.
void deform_conv2d(const float* input, const float* weight, const float* offset,
                   const float* mask, const float* bias,
                   const DeformConv2dParams& p, float* output,
                   const ParallelFor& parallel_for);
void deform_conv2d(const double* input, const double* weight, const double* offset,
                   const double* mask, const double* bias,
                   const DeformConv2dParams& p, double* output,
                   const ParallelFor& parallel_for);
void deform_conv2d(const Half* input, const Half* weight, const Half* offset,
                   const Half* mask, const Half* bias,
                   const DeformConv2dParams& p, Half* output,
                   const ParallelFor& parallel_for);

// The gradients of deform_conv2d's output with respect to its inputs, given
// grad_output (batch, out_channels, out_h, out_w), as torchvision computes
// them: grad_input, grad_weight, grad_offset and grad_bias (out_channels)
// have the shapes of their inputs; grad_mask that of the mask, with respect
// to the mask given or, when mask is null, to a mask of ones; a null
// grad_mask is not computed.  All are overwritten.  Deterministic: the same
// bits for any thread count (no output is summed in an order that depends on
// the threads).  Call deform_conv2d_check first.
void deform_conv2d_backward(const float* grad_output, const float* input, const float* weight,
                            const float* offset, const float* mask, const DeformConv2dParams& p,
                            float* grad_input, float* grad_weight, float* grad_offset,
                            float* grad_mask, float* grad_bias, const ParallelFor& parallel_for);
void deform_conv2d_backward(const double* grad_output, const double* input,
                            const double* weight, const double* offset, const double* mask,
                            const DeformConv2dParams& p, double* grad_input,
                            double* grad_weight, double* grad_offset, double* grad_mask,
                            double* grad_bias, const ParallelFor& parallel_for);
void deform_conv2d_backward(const Half* grad_output, const Half* input, const Half* weight,
                            const Half* offset, const Half* mask, const DeformConv2dParams& p,
                            Half* grad_input, Half* grad_weight, Half* grad_offset,
                            Half* grad_mask, Half* grad_bias, const ParallelFor& parallel_for);

}  // namespace customops
