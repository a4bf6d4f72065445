#pragma once
// The test programs' one way to stop at a failed CUDA or NCCL call: the call, its place and its
// code on stderr, exit status 1, so a test sees where a run went wrong.
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                   \
  do {                                                                                \
    const int rc_ = int(call);                                                        \
    if (rc_ != 0) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, rc_); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)
