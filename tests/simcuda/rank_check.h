#pragma once
// Checks for the multi-process test programs that scripts/simrun starts once per rank: the first
// failed check prints the rank and the line, and the process exits 1.
#include <cstdio>
#include <cstdlib>

namespace simcuda_rank {

inline int g_rank = 0;  // this process's rank, named in every failure

#define CHECK(cond)                                                                                          \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      std::fprintf(stderr, "rank %d: check failed at line %d: %s\n", simcuda_rank::g_rank, __LINE__, #cond); \
      std::exit(1);                                                                                          \
    }                                                                                                        \
  } while (0)
#define CUDA(call) CHECK((call) == cudaSuccess)
#define NCCL(call) CHECK((call) == ncclSuccess)

// A variable the launcher sets (RANK, WORLD_SIZE): missing is a failed check.
inline int env_int(const char* name) {
  const char* v = std::getenv(name);
  CHECK(v != nullptr);
  return std::atoi(v);
}

}  // namespace simcuda_rank
