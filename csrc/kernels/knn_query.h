// k-nearest-neighbour query over point clouds packed with offsets.
//
// Contract (identical in PyTorch and ONNX Runtime; the PyTorch binding also
// takes int64 offsets and strided tensors, converting them first):
//   xyz        float32 (n, 3)   points of b clouds stored one after another
//   offset     int32   (b)      cumulative end index of each cloud in xyz
//   new_xyz    float32 (m, 3)   query points, packed the same way
//   new_offset int32   (b)      cumulative end index of each query cloud
//   idx        int32   (m, nsample)  global row of the neighbour in xyz
//   dist       float32 (m, nsample)  Euclidean distance (not squared)
// A query searches only the cloud with the same position in the batch.
// Neighbours are sorted by ascending distance, ties by smaller index.
// Distances are compared in double precision, so the order matches
// scipy.spatial.cKDTree on the same float32 points.  Where a cloud has fewer
// than nsample points the rest of the row is idx = -1, dist = +inf.
// Every coordinate of xyz and new_xyz must be finite: a NaN or infinite one
// is refused (std::invalid_argument naming the argument and the first bad
// row), as scipy.spatial.cKDTree refuses such points.  A NaN has no distance
// to sort by, and any rule for it (skip the point, never match the query)
// would return a plausible answer for what is almost always an upstream bug.
#pragma once

#include <cstdint>

#include "parallel.h"
#include "shape.h"

namespace customops {

// Checks shapes and nsample (what a fake tensor has); throws
// std::invalid_argument naming the bad argument.
void knn_query_check_shapes(const Shape& xyz_shape, const Shape& offset_shape,
                            const OptionalShape& new_xyz_shape,
                            const OptionalShape& new_offset_shape, int64_t nsample);

// knn_query_check_shapes, then the offsets' values; throws
// std::invalid_argument naming the bad argument.  new_xyz_shape and
// new_offset_shape are empty (and new_offset null) when the queries are xyz.
void knn_query_check(const Shape& xyz_shape, const Shape& offset_shape,
                     const int32_t* offset, const OptionalShape& new_xyz_shape,
                     const OptionalShape& new_offset_shape, const int32_t* new_offset,
                     int64_t nsample);

// Fills idx and dist (m * nsample each).  Call knn_query_check first.
// Throws std::invalid_argument, before writing anything, when a coordinate
// of xyz or new_xyz is NaN or infinite (its values are read here, not by the
// check, which sees only shapes and offsets).
void knn_query(const float* xyz, const int32_t* offset, int64_t n,
               const float* new_xyz, const int32_t* new_offset, int64_t m,
               int64_t b, int64_t nsample, int32_t* idx, float* dist,
               const ParallelFor& parallel_for);

}  // namespace customops
