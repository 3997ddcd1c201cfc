// Private to knn_query.cpp: the k best (squared distance, row) pairs of one
// query.  Pairs order by distance, then by row, which is the required output
// order.  Unfilled slots hold (bound, kNoPoint), which every real point
// within the bound beats: with bound = +inf every point; with a smaller
// bound the search also skips what lies beyond it, and full() says whether
// k points were within (if so, they are the k nearest).
//
// Two interchangeable implementations: a sorted array for small k, where
// shifting a few entries beats sifting through a heap, and a max-heap for
// large k, where shifting costs O(k) per insertion.  The sorted array was
// measured faster up to k of about 200.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

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

// Writes sorted neighbours as rows and Euclidean distances.
inline void write_sorted(const std::vector<Neighbour>& sorted, int32_t* idx,
                         float* dist) {
  for (size_t j = 0; j < sorted.size(); ++j) {
    const bool found = sorted[j].id != kNoPoint;
    idx[j] = found ? sorted[j].id : -1;
    dist[j] = found ? static_cast<float>(std::sqrt(sorted[j].d2))
                    : std::numeric_limits<float>::infinity();
  }
}

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

  // Call only when admits(d2, id).
  void insert(double d2, int32_t id) {
    const Neighbour entry{d2, id};
    size_t j = best_.size() - 1;
    for (; j > 0 && before(entry, best_[j - 1]); --j) best_[j] = best_[j - 1];
    best_[j] = entry;
    worst_ = best_.back();
  }

  void write(int32_t* idx, float* dist) const { write_sorted(best_, idx, dist); }

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
    write_sorted(heap_, idx, dist);
  }

 private:
  std::vector<Neighbour> heap_;
};

}  // namespace knn
}  // namespace customops
