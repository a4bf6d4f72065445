// Every copy entry point beyond cudaMemcpy(2D)(Async), with known bytes and directions
// (tests/integration/test_safety.cpp asserts them). In the simulation a symbol is device memory.
//   h2d pageable 4 calls 4000 B   h2d pinned 3 calls 640 B   d2d 2 calls 320 B
//   d2h pageable 5 calls 1000 B   d2h pinned 2 calls 384 B   batches (no direction) 2 calls 630 B
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.hpp"
#include "cudart_per_thread.h"

namespace {

// A width x height x depth box at the origin of two pitched allocations.
cudaMemcpy3DParms box(void* dst, const void* src, size_t pitch, size_t ysize, size_t width, size_t height, size_t depth,
                      cudaMemcpyKind kind) {
  cudaMemcpy3DParms p{};
  p.srcPtr = {const_cast<void*>(src), pitch, width, ysize};
  p.dstPtr = {dst, pitch, width, ysize};
  p.extent = {width, height, depth};
  p.kind = kind;
  return p;
}

}  // namespace

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void *symbol = nullptr, *device = nullptr, *pinned = nullptr;
  CHECK(cudaMalloc(&symbol, 4096));
  CHECK(cudaMalloc(&device, 4096));
  CHECK(cudaMallocHost(&pinned, 4096));
  std::vector<unsigned char> pageable(4096, 7), back(4096, 0);
  std::memset(pinned, 7, 4096);
  CHECK(cudaMemset(device, 7, 4096));

  for (int i = 0; i < 2; ++i) CHECK(cudaMemcpyToSymbol(symbol, pageable.data(), 1000, 0, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpyToSymbol_ptds(symbol, pageable.data(), 800, 0, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpyToSymbol(symbol, pinned, 512, 100, cudaMemcpyDefault));
  CHECK(cudaMemcpyToSymbolAsync_ptsz(symbol, pinned, 64, 0, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyToSymbolAsync(symbol, device, 256, 0, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < 3; ++i) CHECK(cudaMemcpyFromSymbol(back.data(), symbol, 300, 8, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpyFromSymbol_ptds(back.data(), symbol, 64, 0, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpyFromSymbolAsync_ptsz(back.data(), symbol, 36, 0, cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemcpyFromSymbolAsync(pinned, symbol, 128, 0, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  // What went into the symbol came back out of it.
  if (back[0] != 7 || back[299] != 7) return 2;

  const cudaMemcpy3DParms upload = box(device, pageable.data(), 128, 4, 100, 4, 3, cudaMemcpyHostToDevice);
  CHECK(cudaMemcpy3D(&upload));
  const cudaMemcpy3DParms upload_pinned = box(device, pinned, 32, 2, 16, 2, 2, cudaMemcpyHostToDevice);
  CHECK(cudaMemcpy3D_ptds(&upload_pinned));
  const cudaMemcpy3DParms download = box(pinned, device, 64, 2, 64, 2, 2, cudaMemcpyDeviceToHost);
  CHECK(cudaMemcpy3DAsync(&download, s));
  const cudaMemcpy3DParms on_device = box(symbol, device, 64, 2, 32, 2, 1, cudaMemcpyDeviceToDevice);
  CHECK(cudaMemcpy3DAsync_ptsz(&on_device, s));

  void* dsts[3] = {device, static_cast<char*>(device) + 1024, back.data()};
  const void* srcs[3] = {pinned, symbol, symbol};
  size_t sizes[3] = {100, 200, 300};
  cudaMemcpyAttributes attrs[1] = {};
  attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t first[1] = {0};
  CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, attrs, first, 1, s));
  size_t small[2] = {10, 20};
  CHECK(cudaMemcpyBatchAsync_ptsz(dsts, srcs, small, 2, attrs, first, 1, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(symbol));
  CHECK(cudaFree(device));
  return 0;
}
