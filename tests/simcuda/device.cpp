// What the simulated device is: its properties and attributes, a kernel's attributes and occupancy,
// peer access, device variables. PyTorch asks these before its first kernel (CUDAHooks::init,
// at::cuda::getDeviceProperties, CUB's dispatch, launch heuristics), so each answer is the one an
// H100 SXM (compute capability 9.0) gives, not a placeholder a heuristic would divide by.
#include "internal.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

// Declared by the toolkit's headers only for nvcc-compiled code, exported by the real runtime.
extern "C" {
void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* deviceAddress, const char* deviceName, int ext,
                       size_t size, int constant, int global);
char __cudaInitModule(void** fatCubinHandle);
}

using namespace simcuda;

std::size_t simcuda::simulated_memory_bytes() { return std::size_t{80} << 30; }

namespace {

constexpr int kMultiprocessors = 132;
constexpr int kThreadsPerMultiprocessor = 2048;
constexpr int kBlocksPerMultiprocessor = 32;
constexpr size_t kSharedPerMultiprocessor = 228 * 1024;
constexpr size_t kSharedPerBlockOptin = 227 * 1024;

bool valid_device(int device) { return device >= 0 && device < device_count(); }

cudaDeviceProp describe(int device) {
  cudaDeviceProp p{};
  std::snprintf(p.name, sizeof p.name, "simcuda H100 %d (simulated)", device);
  for (int i = 0; i < 16; ++i) p.uuid.bytes[i] = static_cast<char>(0x51 + device * 16 + i);
  p.totalGlobalMem = simulated_memory_bytes();
  p.sharedMemPerBlock = 48 * 1024;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.memPitch = 0x7fffffff;
  p.maxThreadsPerBlock = 1024;
  p.maxThreadsDim[0] = 1024, p.maxThreadsDim[1] = 1024, p.maxThreadsDim[2] = 64;
  p.maxGridSize[0] = 0x7fffffff, p.maxGridSize[1] = 65535, p.maxGridSize[2] = 65535;
  p.totalConstMem = 64 * 1024;
  p.major = 9;
  p.minor = 0;
  p.textureAlignment = 512;
  p.texturePitchAlignment = 32;
  p.multiProcessorCount = kMultiprocessors;
  p.canMapHostMemory = 1;
  p.concurrentKernels = 1;
  p.ECCEnabled = 1;
  p.pciBusID = (0x3B + 0x11 * device) & 0xFF;  // as cudaDeviceGetPCIBusId says
  p.asyncEngineCount = 2;
  p.unifiedAddressing = 1;
  p.memoryBusWidth = 5120;
  p.l2CacheSize = 50 * 1024 * 1024;
  p.persistingL2CacheMaxSize = 30 * 1024 * 1024;
  p.maxThreadsPerMultiProcessor = kThreadsPerMultiprocessor;
  p.streamPrioritiesSupported = 1;
  p.globalL1CacheSupported = 1;
  p.localL1CacheSupported = 1;
  p.sharedMemPerMultiprocessor = kSharedPerMultiprocessor;
  p.regsPerMultiprocessor = 65536;
  p.managedMemory = 1;
  p.concurrentManagedAccess = 1;
  p.computePreemptionSupported = 1;
  p.cooperativeLaunch = 1;
  p.sharedMemPerBlockOptin = kSharedPerBlockOptin;
  p.maxBlocksPerMultiProcessor = kBlocksPerMultiprocessor;
  p.reservedSharedMemPerBlock = 1024;
  p.hostRegisterSupported = 1;
  p.memoryPoolsSupported = 1;
  p.clusterLaunch = 1;
  p.hostNumaId = -1;
  p.gpuPciDeviceID = 0x233010de;  // H100 SXM5, NVIDIA's vendor id
  return p;
}

// Made once: CUB and PyTorch's launch heuristics ask for attributes at each op.
const cudaDeviceProp& properties(int device) {
  static const std::vector<cudaDeviceProp> all = [] {
    std::vector<cudaDeviceProp> out;
    for (int d = 0; d < device_count(); ++d) out.push_back(describe(d));
    return out;
  }();
  return all[static_cast<std::size_t>(device)];
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (!prop) return record_error(cudaErrorInvalidValue);
  if (!valid_device(device)) return record_error(cudaErrorInvalidDevice);
  *prop = properties(device);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (!value) return record_error(cudaErrorInvalidValue);
  if (!valid_device(device)) return record_error(cudaErrorInvalidDevice);
  const cudaDeviceProp& p = properties(device);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxBlockDimX:
      *value = p.maxThreadsDim[0];
      break;
    case cudaDevAttrMaxBlockDimY:
      *value = p.maxThreadsDim[1];
      break;
    case cudaDevAttrMaxBlockDimZ:
      *value = p.maxThreadsDim[2];
      break;
    case cudaDevAttrMaxGridDimX:
      *value = p.maxGridSize[0];
      break;
    case cudaDevAttrMaxGridDimY:
      *value = p.maxGridSize[1];
      break;
    case cudaDevAttrMaxGridDimZ:
      *value = p.maxGridSize[2];
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrTotalConstantMemory:
      *value = static_cast<int>(p.totalConstMem);
      break;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      break;
    case cudaDevAttrMaxRegistersPerBlock:
      *value = p.regsPerBlock;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = p.maxThreadsPerMultiProcessor;
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(p.sharedMemPerMultiprocessor);
      break;
    case cudaDevAttrMaxRegistersPerMultiprocessor:
      *value = p.regsPerMultiprocessor;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    case cudaDevAttrMaxBlocksPerMultiprocessor:
      *value = p.maxBlocksPerMultiProcessor;
      break;
    case cudaDevAttrL2CacheSize:
      *value = p.l2CacheSize;
      break;
    case cudaDevAttrGlobalMemoryBusWidth:
      *value = p.memoryBusWidth;
      break;
    case cudaDevAttrPciBusId:
      *value = p.pciBusID;
      break;
    case cudaDevAttrAsyncEngineCount:
      *value = p.asyncEngineCount;
      break;
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrConcurrentKernels:
    case cudaDevAttrCanMapHostMemory:
    case cudaDevAttrStreamPrioritiesSupported:
    case cudaDevAttrManagedMemory:
    case cudaDevAttrConcurrentManagedAccess:
    case cudaDevAttrCooperativeLaunch:
    case cudaDevAttrMemoryPoolsSupported:
    case cudaDevAttrHostRegisterSupported:
    case cudaDevAttrClusterLaunch:
    case cudaDevAttrEccEnabled:
      *value = 1;
      break;
    default:
      *value = 0;
      break;
  }
  return cudaSuccess;
}

// Every kernel compiled for sm_90 by nvcc 13: CUB reads ptxVersion from its EmptyKernel to pick a
// tuning policy.
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  if (!attr || !func) return record_error(cudaErrorInvalidValue);
  *attr = cudaFuncAttributes{};
  attr->maxThreadsPerBlock = 1024;
  attr->numRegs = 32;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  attr->maxDynamicSharedSizeBytes = 48 * 1024;
  attr->preferredShmemCarveout = -1;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  if (!func) return record_error(cudaErrorInvalidDeviceFunction);
  (void)attr, (void)value;
  return cudaSuccess;
}

// Threads are the limit: 2048 per multiprocessor, 32 blocks at most.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func, int blockSize,
                                                                   size_t dynamicSMemSize, unsigned int flags) {
  if (!numBlocks || !func || blockSize <= 0) return record_error(cudaErrorInvalidValue);
  (void)flags;
  int blocks = kThreadsPerMultiprocessor / blockSize;
  if (dynamicSMemSize > 0) blocks = std::min<int>(blocks, static_cast<int>(kSharedPerMultiprocessor / dynamicSMemSize));
  *numBlocks = std::min(blocks, kBlocksPerMultiprocessor);
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func, int blockSize,
                                                          size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize,
                                                                cudaOccupancyDefault);
}

// Devices of one simulated node reach each other's memory (copies between them are memmoves).
cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  if (!canAccessPeer) return record_error(cudaErrorInvalidValue);
  if (!valid_device(device) || !valid_device(peerDevice)) return record_error(cudaErrorInvalidDevice);
  *canAccessPeer = device != peerDevice;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  if (!valid_device(peerDevice) || peerDevice == currentDevice()) return record_error(cudaErrorInvalidDevice);
  if (flags != 0) return record_error(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

// A __device__ variable lives at its host shadow's address here (as cudaMemcpyToSymbol treats a
// symbol): registered as device memory, so copies to and from it are device copies.
void __cudaRegisterVar(void** fatCubinHandle, char* hostVar, char* deviceAddress, const char* deviceName, int ext,
                       size_t size, int constant, int global) {
  (void)fatCubinHandle, (void)deviceAddress, (void)deviceName, (void)ext, (void)constant, (void)global;
  const auto base = reinterpret_cast<std::uintptr_t>(hostVar);
  if (hostVar && size > 0 && !overlaps_any(base, size)) register_range({base, size, MemKind::Device, 0});
}

char __cudaInitModule(void** fatCubinHandle) { return fatCubinHandle != nullptr; }

cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  if (!devPtr || !symbol) return record_error(cudaErrorInvalidSymbol);
  *devPtr = const_cast<void*>(symbol);
  return cudaSuccess;
}

}  // extern "C"
