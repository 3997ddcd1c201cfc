// The math of pc::farthest_point_sample for tests/test_new_op.py: what a user writes into the
// generated csrc/farthest_point_sample.h in place of the placeholder.  Groups of rows by sorted
// batch ids (an id without rows is an empty group); random_start picks row 7919 % size.
inline void check_farthest_point_sample_attributes(double ratio, bool random_start) {
  if (!(ratio > 0 && ratio <= 1))
    throw std::invalid_argument("farthest_point_sample: ratio must be in (0, 1], got " + std::to_string(ratio));
}

// Each group's rows [begin, end), an id without rows included (empty).
inline std::vector<std::pair<int64_t, int64_t>> fps_groups(const int64_t* batch, int64_t n) {
  if (!batch) return {{0, n}};
  std::vector<std::pair<int64_t, int64_t>> groups;
  for (int64_t g = 0, row = 0; row < n; ++g) {
    if (batch[row] < g) throw std::invalid_argument("farthest_point_sample: batch must be sorted non-negative ids");
    int64_t end = row;
    while (end < n && batch[end] == g) ++end;
    groups.push_back({row, end});
    row = end;
  }
  return groups;
}

template <typename T>
int64_t farthest_point_sample_m(const T* pos, const int64_t* batch, double ratio, bool random_start,
    int64_t n) {
  int64_t m = 0;
  for (auto [begin, end] : fps_groups(batch, n)) m += static_cast<int64_t>(std::ceil(ratio * (end - begin)));
  return m;
}

template <typename T>
void farthest_point_sample(const T* pos, const int64_t* batch, double ratio, bool random_start, int64_t n,
    int64_t m, int64_t* idx, const ParallelFor&) {  // serial: each pick needs the previous one
  int64_t out = 0;
  std::vector<double> dist;
  for (auto [begin, end] : fps_groups(batch, n)) {
    const int64_t size = end - begin;
    if (size == 0) continue;
    const int64_t take = static_cast<int64_t>(std::ceil(ratio * size));
    int64_t pick = begin + (random_start ? 7919 : 0) % size;
    dist.assign(size, INFINITY);
    for (int64_t k = 0; k < take; ++k) {
      idx[out++] = pick;
      const double px = pos[3 * pick], py = pos[3 * pick + 1], pz = pos[3 * pick + 2];
      int64_t best = begin;
      double best_d = -1;
      for (int64_t i = begin; i < end; ++i) {
        const double dx = double(pos[3 * i]) - px, dy = double(pos[3 * i + 1]) - py, dz = double(pos[3 * i + 2]) - pz;
        double& d = dist[i - begin];
        d = std::min(d, dx * dx + dy * dy + dz * dz);
        if (d > best_d) best_d = d, best = i;
      }
      pick = best;
    }
  }
}
