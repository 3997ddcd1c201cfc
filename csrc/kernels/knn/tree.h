// Private to knn_query.cpp: one bounding-box tree per cloud and the exact
// k-nearest search over it.
//
// A cloud's points are stored in Morton order (morton.h).  A node covers
// a run of that order and splits it where the highest Morton bit that
// differs inside the run flips, i.e. at the middle of its cell along one
// axis.  A long run of equal codes is first re-sorted on a grid of its own
// box, and split in the middle if its points all coincide.  Every subtree is
// thus a compact region however the density varies.  Each node holds the bounding
// boxes of its two children, so one cache line decides where to descend, and
// the search prunes with true box distances.  Leaves are runs of at most
// kLeafSize points, scanned linearly.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "morton.h"
#include "nearest.h"
#include "../parallel.h"
#include "../cpu/simd.h"

namespace customops {
namespace knn {

// Scanning a point is much cheaper than visiting a node (a likely branch
// miss), so leaves are fairly long: at k = 16, 48 and 64 measured about 5%
// faster than 32, 24 slower.
constexpr int32_t kLeafSize = 48;

// Points of all clouds in tree order, one array per field so that leaf
// scans vectorise.  x, y and z have kPadding values (0) past the last point,
// as a leaf scan reads whole vectors.
constexpr int64_t kPadding = 8;

struct Points {
  std::vector<float> x, y, z;
  std::vector<int32_t> id;  // global row in xyz
};

// A subtree as its parent sees it.
struct Child {
  float lo[3], hi[3];  // bounding box of its points
  int32_t min_id;      // smallest global row in it
  int32_t ref;         // >= 0: a node; < 0: leaf ~ref
};

struct alignas(64) Node {
  // The children's boxes: child side's is lo/hi[2 * axis + side].  Axis
  // by axis, so that box_distances computes both children's in one vector.
  float lo[6], hi[6];
  int32_t min_id[2];
  int32_t ref[2];
};

struct Tree {
  int64_t begin = 0;  // the cloud's first position in Points
  int64_t count = 0;  // points in the cloud
  Frame frame;        // Morton frame, reused to order the queries
  int32_t root = 0;   // a Child::ref
  std::vector<Node> nodes;
  std::vector<int32_t> leaf_begin;  // leaf j is [leaf_begin[j], [j + 1])
};

struct Forest {
  Points points;
  std::vector<Tree> trees;
};

// Where run [begin, end) of sorted codes splits: at the first code with the
// highest differing bit set, or in the middle if all codes are equal.
inline int32_t split_of(const uint64_t* codes, int32_t begin, int32_t end) {
  const uint64_t differ = codes[begin] ^ codes[end - 1];
  if (differ == 0) return begin + (end - begin) / 2;
  uint64_t bit = uint64_t{1} << 63;
  while (!(differ & bit)) bit >>= 1;
  return static_cast<int32_t>(
      std::partition_point(codes + begin, codes + end,
                           [bit](uint64_t code) { return !(code & bit); }) -
      codes);
}

// Nodes and leaves of a subtree; refs are indices into its own vectors.
struct Part {
  std::vector<Node> nodes;
  std::vector<int32_t> leaf_begin;
};

// Builds subtrees of one cloud's tree over positions of its points.
class TreeBuilder {
 public:
  TreeBuilder(Points& points, uint64_t* codes, const Tree& tree)
      : x_(points.x.data() + tree.begin),
        y_(points.y.data() + tree.begin),
        z_(points.z.data() + tree.begin),
        id_(points.id.data() + tree.begin),
        codes_(codes + tree.begin) {}

  // The subtree over positions [begin, end), its nodes and leaves in part.
  Child build(int32_t begin, int32_t end, Part& part) {
    if (end - begin <= kLeafSize) return leaf(begin, end, part);
    const int32_t mid = split(begin, end);
    const int32_t self = static_cast<int32_t>(part.nodes.size());
    part.nodes.emplace_back();
    const Child children[2] = {build(begin, mid, part), build(mid, end, part)};
    return join(children, self, part.nodes[self]);
  }

  // Where [begin, end) splits (refined first if all its codes are equal).
  int32_t split(int32_t begin, int32_t end) {
    if (codes_[begin] == codes_[end - 1]) refine(begin, end);
    return split_of(codes_, begin, end);
  }

  // Fills node with its two children; returns it as a child with ref self.
  static Child join(const Child children[2], int32_t self, Node& node) {
    Child merged = children[0];
    merged.ref = self;
    for (int side = 0; side < 2; ++side) {
      const Child& child = children[side];
      for (int d = 0; d < 3; ++d) {
        node.lo[2 * d + side] = child.lo[d];
        node.hi[2 * d + side] = child.hi[d];
        merged.lo[d] = std::min(merged.lo[d], child.lo[d]);
        merged.hi[d] = std::max(merged.hi[d], child.hi[d]);
      }
      node.min_id[side] = child.min_id;
      node.ref[side] = child.ref;
      merged.min_id = std::min(merged.min_id, child.min_id);
    }
    return merged;
  }

 private:
  // A long run in one grid cell (a dense cluster far smaller than the cloud,
  // say beside a distant outlier) would otherwise split by position in the
  // order only.  Re-sort it on a grid spanning just its own box; that stays
  // stable, so exact duplicates keep row order.  Flat runs (all points
  // equal) are left as they are.
  void refine(int32_t begin, int32_t end) {
    const auto point_at = [this](int64_t i) {
      return std::array<float, 3>{x_[i], y_[i], z_[i]};
    };
    const Frame frame = frame_of(begin, end, point_at);
    if (frame.flat()) return;
    const int32_t count = end - begin;
    std::vector<int32_t> order(count);
    for (int32_t i = 0; i < count; ++i) {
      codes_[begin + i] = morton_code(frame, point_at(begin + i));
      order[i] = i;
    }
    radix_sort_serial(codes_ + begin, order.data(), count);
    permute(x_ + begin, order);
    permute(y_ + begin, order);
    permute(z_ + begin, order);
    permute(id_ + begin, order);
  }

  template <typename T>
  static void permute(T* values, const std::vector<int32_t>& order) {
    const std::vector<T> old(values, values + order.size());
    for (size_t i = 0; i < order.size(); ++i) values[i] = old[order[i]];
  }

  Child leaf(int32_t begin, int32_t end, Part& part) {
    Child leaf{{x_[begin], y_[begin], z_[begin]},
               {x_[begin], y_[begin], z_[begin]},
               id_[begin],
               ~static_cast<int32_t>(part.leaf_begin.size())};
    part.leaf_begin.push_back(begin);
    for (int32_t i = begin + 1; i < end; ++i) {
      const float p[3] = {x_[i], y_[i], z_[i]};
      for (int d = 0; d < 3; ++d) {
        leaf.lo[d] = std::min(leaf.lo[d], p[d]);
        leaf.hi[d] = std::max(leaf.hi[d], p[d]);
      }
      leaf.min_id = std::min(leaf.min_id, id_[i]);
    }
    return leaf;
  }

  float *x_, *y_, *z_;
  int32_t* id_;
  uint64_t* codes_;
};

// Builds one cloud's tree.  The top levels are split serially until every
// range holds at most 1/kTasks of the points; those ranges are built as
// independent subtrees on the pool, then appended in position order (so
// leaf j still ends where leaf j + 1 begins) with their refs shifted, and
// the top nodes are filled in bottom-up.
inline void build_tree(Points& points, uint64_t* codes, Tree& tree,
                       const ParallelFor& parallel_for) {
  constexpr int64_t kTasks = 16;
  TreeBuilder builder(points, codes, tree);
  struct Task {
    int32_t begin, end;
    int32_t parent, side;  // parent -1: the root
  };
  std::vector<Task> tasks;
  std::vector<Task> top;  // top node i covers top[i], attached to its parent
  const int64_t task_size = std::max<int64_t>(tree.count / kTasks, kLeafSize);
  const auto split_top = [&](const auto& self, Task range) -> void {
    if (range.end - range.begin <= task_size) {
      tasks.push_back(range);
      return;
    }
    const int32_t mid = builder.split(range.begin, range.end);
    const int32_t node = static_cast<int32_t>(top.size());
    top.push_back(range);
    self(self, {range.begin, mid, node, 0});
    self(self, {mid, range.end, node, 1});
  };
  split_top(split_top, {0, static_cast<int32_t>(tree.count), -1, 0});

  std::vector<Part> parts(tasks.size());
  std::vector<Child> subtrees(tasks.size());
  parallel_for(static_cast<int64_t>(tasks.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) {
      subtrees[t] = builder.build(tasks[t].begin, tasks[t].end, parts[t]);
    }
  });

  // children[i][side]: what top node i holds on that side.
  std::vector<std::array<Child, 2>> children(top.size());
  tree.nodes.assign(top.size(), Node{});
  Child root{};
  const auto attach = [&](const Task& where, const Child& child) {
    (where.parent < 0 ? root : children[where.parent][where.side]) = child;
  };
  for (size_t t = 0; t < tasks.size(); ++t) {
    const int32_t node_shift = static_cast<int32_t>(tree.nodes.size());
    const int32_t leaf_shift = static_cast<int32_t>(tree.leaf_begin.size());
    const auto shifted = [&](int32_t ref) {
      return ref >= 0 ? ref + node_shift : ~(~ref + leaf_shift);
    };
    for (Node node : parts[t].nodes) {
      for (int32_t& ref : node.ref) ref = shifted(ref);
      tree.nodes.push_back(node);
    }
    tree.leaf_begin.insert(tree.leaf_begin.end(), parts[t].leaf_begin.begin(),
                           parts[t].leaf_begin.end());
    Child child = subtrees[t];
    child.ref = shifted(child.ref);
    attach(tasks[t], child);
  }
  // A top node was created before the top nodes below it: fill in reverse.
  for (int32_t i = static_cast<int32_t>(top.size()) - 1; i >= 0; --i) {
    attach(top[i], TreeBuilder::join(children[i].data(), i, tree.nodes[i]));
  }
  tree.root = root.ref;
  tree.leaf_begin.push_back(static_cast<int32_t>(tree.count));
}

// Builds one tree per cloud of xyz, cloud c being rows
// [offset[c-1], offset[c]).
inline Forest build_forest(const float* xyz, const int32_t* offset, int64_t n,
                           int64_t b, const ParallelFor& parallel_for) {
  Forest forest;
  forest.trees.resize(b);
  std::vector<Frame> frames(b);
  parallel_for(b, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      Tree& tree = forest.trees[c];
      tree.begin = c == 0 ? 0 : offset[c - 1];
      tree.count = offset[c] - tree.begin;
      tree.frame = frame_of(tree.begin, tree.begin + tree.count,
                            [xyz](int64_t i) {
                              return std::array<float, 3>{
                                  xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]};
                            });
      frames[c] = tree.frame;
    }
  });

  MortonOrder order = morton_order(xyz, offset, b, frames, parallel_for);
  Points& points = forest.points;
  points.x.resize(n + kPadding);
  points.y.resize(n + kPadding);
  points.z.resize(n + kPadding);
  points.id.resize(n);
  constexpr int64_t kCopyGrain = 1 << 14;
  parallel_for(n, kCopyGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* p = xyz + 3 * int64_t{order.rows[i]};
      points.x[i] = p[0];
      points.y[i] = p[1];
      points.z[i] = p[2];
      points.id[i] = order.rows[i];
    }
  });

  for_each_cloud(offset, b, parallel_for,
                 [&](int64_t c, int64_t, int64_t, const ParallelFor& inner) {
                   Tree& tree = forest.trees[c];
                   if (tree.count > 0) build_tree(points, order.codes.data(), tree, inner);
                 });
  return forest;
}

// Lower bounds on the squared distance from q to any point in each child's
// box, both children's in the two lanes of one vector.  Per axis the gap
// to the box is at most |q - p| also after rounding (rounding is monotonic),
// and the squares are summed in the same order as point distances, so a
// bound never exceeds a computed point distance: pruning is exact, ties
// included.  Vectors also keep the clamps at 0 branch-free: as scalar code
// the compiler turns each into a branch, which the search mispredicts
// often.  A NaN coordinate gives a NaN bound (nothing admitted).
inline void box_distances(const double q[3], const Node& node, double bound[2]) {
  using Doubles = Vec<double, 2>;
  const Doubles zero = {0, 0};
  Doubles sum = zero;
  for (int d = 0; d < 3; ++d) {
    Doubles lo, hi;
    load_as<float, double, 2>(lo, node.lo + 2 * d);
    load_as<float, double, 2>(hi, node.hi + 2 * d);
    const Doubles below = lo - q[d];
    const Doubles above = q[d] - hi;
    Doubles gap = below < above ? above : below;  // std::max: keeps a NaN below
    gap = gap < zero ? zero : gap;
    sum = d == 0 ? gap * gap : sum + gap * gap;
  }
  store<double, 2>(bound, sum);
}

// A subtree the search put aside, with the bound it had then.
struct Pending {
  double bound;
  int32_t min_id;
  int32_t ref;
};

// Squared distances from q to the leaf's points [begin, end) into d2, and a
// bit per point within kth, computed W points at a time.  Vectors may read
// past the leaf (into the next one, or Points' padding at the end); those
// lanes are cut from the mask.  The bits are gathered in the lanes of a
// vector and OR-ed together once per leaf, as GCC's generic vectors have no
// per-comparison movemask.  The sum (dx*dx + dy*dy) + dz*dz is cKDTree's
// order; the per-ISA copies are compiled without FMA, so it is not fused.
template <int W>
__attribute__((always_inline)) inline uint64_t leaf_distances(
    const Points& points, int64_t begin, int64_t end, const double q[3],
    double kth, double* d2) {
  using Doubles = Vec<double, W>;
  using Bits = Vec<int64_t, W>;
  static_assert(kLeafSize <= 64, "one bit per leaf point");
  static_assert(W <= kPadding, "a vector past the last point stays in the padding");
  Doubles qx, qy, qz, limit;
  Bits bit;
  for (int l = 0; l < W; ++l) {
    qx[l] = q[0];
    qy[l] = q[1];
    qz[l] = q[2];
    limit[l] = kth;
    bit[l] = int64_t{1} << l;
  }
  Bits within = {};
  const int64_t count = end - begin;
  for (int64_t i = 0; i < count; i += W) {
    Doubles x, y, z;
    load_as<float, double, W>(x, points.x.data() + begin + i);
    load_as<float, double, W>(y, points.y.data() + begin + i);
    load_as<float, double, W>(z, points.z.data() + begin + i);
    const Doubles dx = qx - x;
    const Doubles dy = qy - y;
    const Doubles dz = qz - z;
    const Doubles d = (dx * dx + dy * dy) + dz * dz;
    store<double, W>(d2 + i, d);
    within |= (d <= limit) & bit;
    bit <<= W;
  }
  uint64_t mask = 0;
  for (int l = 0; l < W; ++l) mask |= static_cast<uint64_t>(within[l]);
  return mask & ((uint64_t{1} << count) - 1);  // count < 64
}

// Exact k-nearest search of one tree for the query q: depth first, nearer
// child first, skipping subtrees that cannot hold anything `Nearest` would
// admit.  A loop with an explicit stack (`pending`, scratch reused across
// queries) rather than recursion, so that the whole search inlines into the
// per-ISA copies of the caller (a recursive function would be compiled for
// the baseline only).
template <typename Nearest, int W>
__attribute__((always_inline)) inline void search(const Forest& forest, const Tree& tree,
                                                  const double q[3], Nearest& nearest,
                                                  std::vector<Pending>& pending) {
  // Room for a whole number of vectors past a full leaf.
  double d2[kLeafSize + W];
  pending.clear();
  int32_t ref = tree.root;
  for (;;) {
    if (ref >= 0) {
      const Node& node = tree.nodes[ref];
      double bound[2];
      box_distances(q, node, bound);
      const int near = bound[1] < bound[0] ? 1 : 0;
      const int far = 1 - near;
      if (nearest.admits(bound[far], node.min_id[far])) {
        pending.push_back({bound[far], node.min_id[far], node.ref[far]});
      }
      if (nearest.admits(bound[near], node.min_id[near])) {
        ref = node.ref[near];
        continue;
      }
    } else {
      // Only the points within the k-th distance at the leaf's start are
      // offered, in leaf order; the exact test (ties by row) is the offer's.
      const int64_t begin = tree.begin + tree.leaf_begin[~ref];
      const int64_t end = tree.begin + tree.leaf_begin[~ref + 1];
      for (uint64_t within = leaf_distances<W>(forest.points, begin, end, q,
                                               nearest.kth(), d2);
           within != 0; within &= within - 1) {
        const int i = __builtin_ctzll(within);
        const int32_t id = forest.points.id[begin + i];
        nearest.template offer<W>(d2[i], id);
      }
    }
    // Resume with the latest subtree put aside that may still hold a neighbour.
    for (;;) {
      if (pending.empty()) return;
      const Pending next = pending.back();
      pending.pop_back();
      if (nearest.admits(next.bound, next.min_id)) {
        ref = next.ref;
        break;
      }
    }
  }
}

}  // namespace knn
}  // namespace customops
