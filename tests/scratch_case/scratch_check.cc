// Drives csrc/kernels/cpu/scratch.h the way a kernel call does, through the
// cases no op call can reach (tests/test_scratch.py).  Prints one line per
// check and exits 0 only if all hold.
#include <cstdint>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <thread>

#include "cpu/scratch.h"

using customops::Scratch;

static int failures = 0;
static void expect(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
  failures += !ok;
}

int main() {
  float* first = nullptr;
  {
    Scratch s;
    first = s.array<float>(1 << 20);
    first[0] = 1.0f;
    expect(reinterpret_cast<uintptr_t>(first) % 64 == 0, "arrays start on a cache line");
  }
  {
    Scratch s;
    expect(s.array<float>(1000) == first, "the next call on the thread gets the same block");
    expect(s.array<float>(10) != first, "a call's second array is another block");
  }
  {
    Scratch s;
    bool threw = false;
    try {
      s.array<char>(size_t{1} << 62);  // more than any machine has
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    expect(threw, "an impossible size throws std::bad_alloc");
  }
  {
    Scratch s;
    float* again = s.array<float>(1000);
    expect(again != nullptr, "after a failed allocation the next call gets memory");
    if (again) again[999] = 2.0f;  // writable (a crash here is a failure too)
  }
  {
    Scratch s;
    bool threw = false;
    try {
      Scratch nested;
    } catch (const std::logic_error&) {
      threw = true;
    }
    expect(threw, "a second Scratch on one thread throws");
  }
  float* other = nullptr;
  std::thread([&] {
    Scratch s;
    other = s.array<float>(1000);
  }).join();
  {
    Scratch s;
    expect(s.array<float>(1000) != other, "another thread has its own blocks");
  }
  return failures ? 1 : 0;
}
