// Exact k-nearest neighbours with one bounding-box tree per cloud.
//
// Every call brings fresh points, so the index is rebuilt each time and must
// be cheap to build, yet the search must stay fast on clustered clouds, where
// a uniform grid degrades into a few overfull cells.  Sorting each cloud
// along a Morton curve (a radix sort, O(n)) and cutting that order at Morton
// cell boundaries into a tree of bounding boxes gives both: building is a few
// linear passes, and the boxes follow the points' density (knn/tree.h).
// Queries are visited in the same Morton order, so consecutive queries touch
// the same tree nodes, and each search starts from the previous one's k-th
// distance.  Its time against cKDTree's and pykdtree's build + query, and
// the CPU each figure came from: docs/benchmarks.md (make bench).
#include "knn_query.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "knn/morton.h"
#include "knn/nearest.h"
#include "knn/tree.h"

namespace customops {
namespace {

constexpr const char* kOp = "knn_query";

// Coordinates per block of the finiteness check (one flag each).
constexpr int64_t kFiniteBlock = 1 << 14;

// Larger nsample is refused before the caller allocates (m, nsample)
// outputs; neighbourhoods in point-cloud networks use tens of points.
constexpr int64_t kMaxNsample = 65536;
// Likewise for the outputs as a whole: m * nsample elements each.  Linux
// overcommits, so an absurd request would not fail at allocation but kill
// the process when the kernel writes the pages.
constexpr int64_t kMaxOutputElements = int64_t{1} << 28;  // 1 GiB per output

// Checks that values[0..count) are >= 0, never decrease, and end at total.
void check_offsets(const char* name, const int32_t* values, int64_t count,
                   int64_t total, const char* total_name) {
  check(values != nullptr, kOp, name, " has no data");
  check(values[0] >= 0, kOp, name, " must be non-negative, got ", name,
        "[0] = ", values[0]);
  for (int64_t i = 1; i < count; ++i) {
    check(values[i] >= values[i - 1], kOp, name, " must be non-decreasing, got ",
          name, "[", i, "] = ", values[i], " < ", name, "[", i - 1,
          "] = ", values[i - 1]);
  }
  check(values[count - 1] == total, kOp, "the last value of ", name,
        " must equal ", total_name, " = ", total, ", got ", values[count - 1]);
}

// Refuses points with a NaN or infinite coordinate, naming the first one.
// Such a point has no distance to order by, and would poison the bounding
// boxes of its tree (a NaN box admits nothing: half a cloud went unsearched).
void check_finite(const char* name, const float* points, int64_t count,
                  const ParallelFor& parallel_for) {
  // A float is NaN or infinite when its exponent bits are all ones.  OR-ing
  // that test over a block vectorises (an early exit would not), so the pass
  // costs little beside the tree build; the slow search for the first bad
  // coordinate runs only in a block known to hold one.
  const int64_t values = 3 * count;
  const int64_t blocks = (values + kFiniteBlock - 1) / kFiniteBlock;
  std::vector<char> bad(static_cast<size_t>(blocks), 0);
  parallel_for(blocks, 4, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const int64_t stop = std::min(values, (block + 1) * kFiniteBlock);
      uint32_t any = 0;
      for (int64_t i = block * kFiniteBlock; i < stop; ++i) {
        uint32_t bits;
        std::memcpy(&bits, points + i, sizeof bits);
        any |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
      }
      bad[block] = static_cast<char>(any);
    }
  });
  for (int64_t block = 0; block < blocks; ++block) {
    if (!bad[block]) continue;
    for (int64_t i = block * kFiniteBlock;; ++i) {
      check(std::isfinite(points[i]), kOp, name, " must be finite (no NaN or inf), got ",
            points[i], " at ", name, "[", i / 3, ", ", i % 3, "]");
    }
  }
}

bool is_points_shape(const Shape& shape) {
  return shape.size() == 2 && shape[0] >= 0 && shape[1] == 3;
}

// A search starts with a guess of its k-th squared distance: this times the
// previous query's.  Consecutive queries in Morton order are close and see
// about the same density, so the guess usually holds k points; the search
// then skips every point beyond it from the first leaf on, instead of first
// sorting in far points it later drops (30% fewer insertions at k = 16).
// A guess that holds fewer than k points costs a second search: 1.6 makes
// that about 3% of queries on uniform clouds, 13% on clustered ones.
constexpr double kGuessScale = 1.6;

// What every range of queries needs.
struct Queries {
  const knn::Forest& forest;
  const float* new_xyz;
  const int32_t* new_offset;
  int64_t b, nsample;
  const std::vector<int32_t>& rows;  // query rows, each cloud's in Morton order
  int32_t* idx;
  float* dist;
};

// Answers the queries at positions [begin, end) of rows, so that
// consecutive searches walk the same tree nodes.  Compiled once per vector
// width W of the leaf scans, below.
template <typename Nearest, int W>
__attribute__((always_inline)) inline void answer_range(const Queries& job, int64_t begin,
                                                        int64_t end) {
  Nearest nearest(job.nsample);
  std::vector<knn::Pending> pending;
  knn::for_each_cloud_part(
      job.new_offset, job.b, begin, end, [&](int64_t c, int64_t lo, int64_t hi) {
        const knn::Tree& tree = job.forest.trees[c];
        constexpr double kAll = std::numeric_limits<double>::infinity();
        double guess = kAll;
        for (int64_t i = lo; i < hi; ++i) {
          const int64_t row = job.rows[i];
          const float* p = job.new_xyz + 3 * row;
          const double q[3] = {p[0], p[1], p[2]};
          nearest.reset(guess);
          if (tree.count > 0) knn::search<Nearest, W>(job.forest, tree, q, nearest, pending);
          if (!nearest.full() && guess < kAll) {  // fewer than k within the guess
            nearest.reset(kAll);
            if (tree.count > 0) knn::search<Nearest, W>(job.forest, tree, q, nearest, pending);
          }
          guess = kGuessScale * nearest.kth();
          nearest.write(job.idx + row * job.nsample, job.dist + row * job.nsample);
        }
      });
}

// The copies of answer_range: two doubles per vector on every CPU (SSE2,
// NEON), four with AVX2.  AVX-512 CPUs take the AVX2 copy: a leaf holds 24
// to 48 points, so eight lanes would add mostly partial vectors.  No FMA in
// the target, so the distance sums keep cKDTree's rounding.  `flatten`
// inlines the lambdas and helpers too: out of line they would be compiled
// for the baseline.
template <typename Nearest>
__attribute__((flatten)) void answer_range_baseline(const Queries& job, int64_t begin, int64_t end) {
  answer_range<Nearest, vector_bytes(Isa::kBaseline) / sizeof(double)>(job, begin, end);
}

#if defined(__x86_64__) || defined(__i386__)
template <typename Nearest>
__attribute__((target("avx2"), flatten)) void answer_range_avx2(const Queries& job, int64_t begin,
                                                       int64_t end) {
  answer_range<Nearest, vector_bytes(Isa::kAvx2) / sizeof(double)>(job, begin, end);
}
#endif

// Answers every query, each cloud's in Morton order.
template <typename Nearest>
void answer_queries(const knn::Forest& forest, const float* new_xyz,
                    const int32_t* new_offset, int64_t m, int64_t b,
                    int64_t nsample, int32_t* idx, float* dist,
                    const ParallelFor& parallel_for) {
  std::vector<knn::Frame> frames(b);
  for (int64_t c = 0; c < b; ++c) frames[c] = forest.trees[c].frame;
  const std::vector<int32_t> rows =
      knn::morton_order(new_xyz, new_offset, b, frames, parallel_for).rows;
  const Queries job{forest, new_xyz, new_offset, b, nsample, rows, idx, dist};
  void (*answer)(const Queries&, int64_t, int64_t) = answer_range_baseline<Nearest>;
#if defined(__x86_64__) || defined(__i386__)
  if (selected_isa() != Isa::kBaseline) answer = answer_range_avx2<Nearest>;
#endif
  // A query costs about a microsecond; ranges of this many amortise the
  // per-range scratch and the cloud lookup.
  constexpr int64_t kGrain = 256;
  parallel_for(m, kGrain, [&](int64_t begin, int64_t end) { answer(job, begin, end); });
}

}  // namespace

void knn_query_check_shapes(const Shape& xyz_shape, const Shape& offset_shape,
                            const OptionalShape& new_xyz_shape,
                            const OptionalShape& new_offset_shape, int64_t nsample) {
  check(is_points_shape(xyz_shape), kOp, "xyz must have shape (n, 3), got ",
        to_text(xyz_shape));
  check(offset_shape.size() == 1 && offset_shape[0] >= 1, kOp,
        "offset must be 1-D with at least one element, got shape ",
        to_text(offset_shape));
  check(new_xyz_shape.has_value() == new_offset_shape.has_value(), kOp,
        "new_xyz and new_offset must be given together");
  if (new_xyz_shape) {
    check(is_points_shape(*new_xyz_shape), kOp,
          "new_xyz must have shape (m, 3), got ", to_text(*new_xyz_shape));
    check(*new_offset_shape == offset_shape, kOp,
          "new_offset must have the shape of offset ", to_text(offset_shape),
          ", got ", to_text(*new_offset_shape));
  }
  check(nsample >= 1, kOp, "nsample must be at least 1, got ", nsample);
  check(nsample <= kMaxNsample, kOp, "nsample must be at most ", kMaxNsample,
        ", got ", nsample);

  const int64_t m = new_xyz_shape ? (*new_xyz_shape)[0] : xyz_shape[0];
  check(m <= kMaxOutputElements / nsample, kOp, "m * nsample must be at most ",
        kMaxOutputElements, " (1 GiB per output), got m = ", m, ", nsample = ", nsample);
}

void knn_query_check(const Shape& xyz_shape, const Shape& offset_shape,
                     const int32_t* offset, const OptionalShape& new_xyz_shape,
                     const OptionalShape& new_offset_shape, const int32_t* new_offset,
                     int64_t nsample) {
  knn_query_check_shapes(xyz_shape, offset_shape, new_xyz_shape, new_offset_shape, nsample);
  const int64_t b = offset_shape[0];
  check_offsets("offset", offset, b, xyz_shape[0], "the number of points n");
  if (new_xyz_shape) {
    check_offsets("new_offset", new_offset, b, (*new_xyz_shape)[0],
                  "the number of queries m");
  }
}

void knn_query(const float* xyz, const int32_t* offset, int64_t n,
               const float* new_xyz, const int32_t* new_offset, int64_t m,
               int64_t b, int64_t nsample, int32_t* idx, float* dist,
               const ParallelFor& parallel_for) {
  check_finite("xyz", xyz, n, parallel_for);
  if (new_xyz != xyz) check_finite("new_xyz", new_xyz, m, parallel_for);
  if (m == 0) return;
  const knn::Forest forest = knn::build_forest(xyz, offset, n, b, parallel_for);
  if (nsample <= knn::BlendNearest::kMaxK) {
    answer_queries<knn::BlendNearest>(forest, new_xyz, new_offset, m, b,
                                      nsample, idx, dist, parallel_for);
  } else if (nsample <= knn::SortedNearest::kMaxK) {
    answer_queries<knn::SortedNearest>(forest, new_xyz, new_offset, m, b,
                                       nsample, idx, dist, parallel_for);
  } else {
    answer_queries<knn::HeapNearest>(forest, new_xyz, new_offset, m, b,
                                     nsample, idx, dist, parallel_for);
  }
}

}  // namespace customops
