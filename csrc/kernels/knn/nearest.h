// Private to knn_query.cpp: the k best (squared distance, row) pairs of one
// query.  Pairs order by distance, then by row, which is the required output
// order.  Unfilled slots hold (bound, kNoPoint), which every real point
// within the bound beats: with bound = +inf every point; with a smaller
// bound the search also skips what lies beyond it, and full() says whether
// k points were within (if so, they are the k nearest).
//
// Three interchangeable implementations, by k: sorted arrays updated
// without a branch, a sorted array updated by shifting, and a max-heap.
// Rewriting every entry costs O(k) per offered pair, shifting O(k) per
// inserted one, sifting O(log k).  offer(d2, id) inserts if admitted.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../cpu/simd.h"

namespace customops {
namespace knn {

// Stands for "no point" in results.
constexpr int32_t kNoPoint = std::numeric_limits<int32_t>::max();

struct Neighbour {
  double d2;
  int32_t id;
};

inline bool before(const Neighbour& a, const Neighbour& b) {
  return a.d2 < b.d2 || (a.d2 == b.d2 && a.id < b.id);
}

// Writes a neighbour as a row and a Euclidean distance.
inline void write_neighbour(double d2, int32_t id, int32_t& idx, float& dist) {
  const bool found = id != kNoPoint;
  idx = found ? id : -1;
  dist = found ? static_cast<float>(std::sqrt(d2)) : std::numeric_limits<float>::infinity();
}

// Ascending arrays of squared distances and rows, entries 1..k; the last
// is the current k-th neighbour.  Entry 0 is a sentinel before every pair,
// and entries past k pad the last vector (their contents never move below k).
//
// offer() rewrites all k entries in vectors of W lanes instead of testing
// admission and shifting the entries behind the new one: at k = 16 a search
// offers about 27 pairs, and SortedNearest's branches then mispredicted
// about 30 times per query.  Rewriting takes 6% more instructions per call
// but 40% fewer mispredictions (cachegrind, 65,536 uniform points); at
// k = 32 it saves few mispredictions for 12% more instructions.  A pair that
// is not admitted leaves every entry as it was.
class BlendNearest {
 public:
  static constexpr int64_t kMaxK = 16;

  explicit BlendNearest(int64_t k)
      : k_(k), d2_(k + 1 + kMaxLanes), id_(k + 1 + kMaxLanes) {
    d2_[0] = -std::numeric_limits<double>::infinity();
    id_[0] = -1;
  }

  void reset(double bound) {
    std::fill(d2_.begin() + 1, d2_.end(), bound);
    std::fill(id_.begin() + 1, id_.end(), kNoPoint);
  }

  bool full() const { return id_[k_] != kNoPoint; }

  // The current k-th squared distance.
  double kth() const { return d2_[k_]; }

  // Whether something at squared distance d2 with row id would enter.
  bool admits(double d2, int32_t id) const {
    return before({d2, id}, {d2_[k_], static_cast<int32_t>(id_[k_])});
  }

  // Entry j becomes: itself if it comes before (d2, id), else (d2, id) if
  // entry j - 1 does, else entry j - 1.  Vectors from the last down, so each
  // reads entries j - 1 that are not rewritten yet.  Rows are held as int64
  // to match the lanes of the distance comparisons.
  template <int W>
  __attribute__((always_inline)) void offer(double d2, int32_t id) {
    static_assert(W <= kMaxLanes, "the padding holds a vector");
    using Doubles = Vec<double, W>;
    using Rows = Vec<int64_t, W>;
    Doubles entry_d2;
    Rows entry_id;
    for (int l = 0; l < W; ++l) {
      entry_d2[l] = d2;
      entry_id[l] = id;
    }
    for (int64_t j = 1 + (k_ - 1) / W * W; j >= 1; j -= W) {
      Doubles here_d2, prev_d2;
      Rows here_id, prev_id;
      load<double, W>(here_d2, d2_.data() + j);
      load<double, W>(prev_d2, d2_.data() + j - 1);
      load<int64_t, W>(here_id, id_.data() + j);
      load<int64_t, W>(prev_id, id_.data() + j - 1);
      const Rows keep =
          (here_d2 < entry_d2) | ((here_d2 == entry_d2) & (here_id < entry_id));
      const Rows put =
          (prev_d2 < entry_d2) | ((prev_d2 == entry_d2) & (prev_id < entry_id));
      const Doubles new_d2 = keep ? here_d2 : put ? entry_d2 : prev_d2;
      const Rows new_id = keep ? here_id : put ? entry_id : prev_id;
      store<double, W>(d2_.data() + j, new_d2);
      store<int64_t, W>(id_.data() + j, new_id);
    }
  }

  void write(int32_t* idx, float* dist) const {
    for (int64_t j = 0; j < k_; ++j) {
      write_neighbour(d2_[j + 1], static_cast<int32_t>(id_[j + 1]), idx[j], dist[j]);
    }
  }

 private:
  static constexpr int kMaxLanes = 8;

  int64_t k_;
  std::vector<double> d2_;
  std::vector<int64_t> id_;
};

// Ascending array; the last entry is the current k-th neighbour.
class SortedNearest {
 public:
  static constexpr int64_t kMaxK = 128;

  explicit SortedNearest(int64_t k) : best_(k) {}

  void reset(double bound) {
    std::fill(best_.begin(), best_.end(), Neighbour{bound, kNoPoint});
    worst_ = best_.back();
  }

  bool full() const { return worst_.id != kNoPoint; }

  // The current k-th squared distance.
  double kth() const { return worst_.d2; }

  // Whether something at squared distance d2 with row id would enter.
  bool admits(double d2, int32_t id) const { return before({d2, id}, worst_); }

  // W is unused: the shift is scalar.
  template <int W>
  void offer(double d2, int32_t id) {
    if (admits(d2, id)) insert(d2, id);
  }

  // Call only when admits(d2, id).
  void insert(double d2, int32_t id) {
    const Neighbour entry{d2, id};
    size_t j = best_.size() - 1;
    for (; j > 0 && before(entry, best_[j - 1]); --j) best_[j] = best_[j - 1];
    best_[j] = entry;
    worst_ = best_.back();
  }

  void write(int32_t* idx, float* dist) const {
    for (size_t j = 0; j < best_.size(); ++j) {
      write_neighbour(best_[j].d2, best_[j].id, idx[j], dist[j]);
    }
  }

 private:
  std::vector<Neighbour> best_;
  Neighbour worst_;  // copy of best_.back(), read on every admission test
};

// Max-heap; the top is the current k-th neighbour.
class HeapNearest {
 public:
  explicit HeapNearest(int64_t k) : heap_(k) {}

  void reset(double bound) {
    std::fill(heap_.begin(), heap_.end(), Neighbour{bound, kNoPoint});
  }

  bool full() const { return heap_[0].id != kNoPoint; }

  // The current k-th squared distance (before write(), which sorts).
  double kth() const { return heap_[0].d2; }

  bool admits(double d2, int32_t id) const { return before({d2, id}, heap_[0]); }

  // W is unused: sifting is scalar.
  template <int W>
  void offer(double d2, int32_t id) {
    if (admits(d2, id)) insert(d2, id);
  }

  // Replaces the top by (d2, id) and sifts it down; call only when admits.
  void insert(double d2, int32_t id) {
    const Neighbour entry{d2, id};
    const size_t size = heap_.size();
    size_t hole = 0;
    for (;;) {
      size_t child = 2 * hole + 1;
      if (child >= size) break;
      if (child + 1 < size && before(heap_[child], heap_[child + 1])) ++child;
      if (!before(entry, heap_[child])) break;
      heap_[hole] = heap_[child];
      hole = child;
    }
    heap_[hole] = entry;
  }

  void write(int32_t* idx, float* dist) {
    std::sort_heap(heap_.begin(), heap_.end(), before);
    for (size_t j = 0; j < heap_.size(); ++j) {
      write_neighbour(heap_[j].d2, heap_[j].id, idx[j], dist[j]);
    }
  }

 private:
  std::vector<Neighbour> heap_;
};

}  // namespace knn
}  // namespace customops
