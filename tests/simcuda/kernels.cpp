// Kernels: registered the way nvcc's generated code registers them with the runtime, launched by
// every launch entry point, run on the stream's worker for a duration the program sets.
//
// The real path (crt/host_runtime.h): at load, each translation unit's registration function calls
// __cudaRegisterFatBinary(&__fatDeviceText) for a module handle, __cudaRegisterFunction(handle,
// hostStub, deviceFun, deviceName, ...) for each __global__ function (deviceName is its mangled
// name), then __cudaRegisterFatBinaryEnd; at exit __cudaUnregisterFatBinary. A launch names the
// kernel by its host stub's address (cudaLaunchKernel's func), or, in code nvcc 13 generates, by the
// cudaKernel_t that __cudaGetKernel returned for that address (__cudaLaunchKernel). A host stub
// pops the <<<...>>> configuration that __cudaPushCallConfiguration pushed.
#include "internal.h"
#include "simcuda.h"

#include <fatbinary_section.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

// Declared by the toolkit's headers only for nvcc-compiled code (or per-thread-default-stream
// builds), but exported by the real libcudart.so.13.
extern "C" {
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st* stream);
cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream);
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                               cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                    cudaStream_t stream);
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                  cudaStream_t stream);
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args);
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                             size_t sharedMem, cudaStream_t stream);
}

using namespace simcuda;

namespace {

struct Kernel {
  std::string name;  // the device (mangled) name
  void** module;
  std::atomic<unsigned long long> duration_ns{0};
};

struct Kernels {
  std::mutex mu;
  std::unordered_map<const void*, std::shared_ptr<Kernel>> by_stub;
  // What __cudaGetKernel hands out: the Kernel's address, valid while its module is registered.
  std::unordered_map<const void*, std::shared_ptr<Kernel>> by_handle;
};

// Leaked on purpose: modules are unregistered by atexit handlers, possibly after static destruction.
Kernels& kernels() {
  static Kernels* k = new Kernels;
  return *k;
}

// A host stub's address or a cudaKernel_t (cudaLaunchKernel accepts both).
std::shared_ptr<Kernel> find_kernel(const void* func) {
  Kernels& k = kernels();
  std::lock_guard lock(k.mu);
  if (auto it = k.by_stub.find(func); it != k.by_stub.end()) return it->second;
  if (auto it = k.by_handle.find(func); it != k.by_handle.end()) return it->second;
  return nullptr;
}

// The limits of every device since compute capability 2.0 (1024 threads a block, grid y and z
// below 65536, grid x below 2^31); cudaErrorInvalidConfiguration otherwise.
bool valid_configuration(dim3 grid, dim3 block) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0) return false;
  if (grid.x > 0x7fffffffu || grid.y > 65535u || grid.z > 65535u) return false;
  if (block.x > 1024u || block.y > 1024u || block.z > 64u) return false;
  return std::uint64_t{block.x} * block.y * block.z <= 1024u;
}

cudaError_t launch(const void* func, dim3 grid, dim3 block, size_t shared, cudaStream_t stream, bool cooperative) {
  auto k = find_kernel(func);
  if (!k) return record_error(cudaErrorInvalidDeviceFunction);
  if (!valid_configuration(grid, block)) return record_error(cudaErrorInvalidConfiguration);
  // The duration is the one set when the kernel is launched (for a graph: when it was captured).
  const auto duration = std::chrono::nanoseconds(k->duration_ns.load());
  Traced as;
  as.activity.kind = SIMCUDA_ACTIVITY_KERNEL;
  as.activity.grid = grid;
  as.activity.block = block;
  as.activity.dynamic_shared_bytes = shared;
  as.activity.cooperative = cooperative;
  as.name = k->name;
  return submit(
      stream,
      [duration] {
        if (duration.count() > 0) gpu_run_for(duration);
      },
      false, std::move(as));
}

// The handle points at the fat binary, as the real one does; the device code is not read.
void** register_module(void* fatCubin) { return new void*(fatCubin); }

std::shared_ptr<Kernel> register_function(void** module, const void* hostFun, const char* deviceName) {
  auto kernel = std::make_shared<Kernel>();
  kernel->name = deviceName;
  kernel->module = module;
  Kernels& k = kernels();
  std::lock_guard lock(k.mu);
  k.by_handle[kernel.get()] = kernel;
  k.by_stub[hostFun] = kernel;
  return kernel;
}

struct CallConfiguration {
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
};
thread_local std::vector<CallConfiguration> tls_configurations;

bool cooperative_attribute(const cudaLaunchConfig_t& config) {
  for (unsigned i = 0; i < config.numAttrs; ++i)
    if (config.attrs[i].id == cudaLaunchAttributeCooperative && config.attrs[i].val.cooperative) return true;
  return false;
}

cudaStream_t per_thread(cudaStream_t s) { return s ? s : cudaStreamPerThread; }

cudaError_t launch_ex(const cudaLaunchConfig_t* config, const void* func, cudaStream_t stream) {
  if (!config || (config->numAttrs && !config->attrs)) return record_error(cudaErrorInvalidValue);
  return launch(func, config->gridDim, config->blockDim, config->dynamicSmemBytes, stream,
                cooperative_attribute(*config));
}

cudaError_t get_kernel(cudaKernel_t* kernel, const void* hostFun) {
  if (!kernel) return record_error(cudaErrorInvalidValue);
  auto k = find_kernel(hostFun);
  if (!k) return record_error(cudaErrorInvalidDeviceFunction);
  *kernel = reinterpret_cast<cudaKernel_t>(k.get());
  return cudaSuccess;
}

}  // namespace

extern "C" {

// ---------------- registration ----------------

void** __cudaRegisterFatBinary(void* fatCubin) { return register_module(fatCubin); }

void __cudaRegisterFatBinaryEnd(void** fatCubinHandle) { (void)fatCubinHandle; }

void __cudaUnregisterFatBinary(void** fatCubinHandle) {
  Kernels& k = kernels();
  {
    std::lock_guard lock(k.mu);
    // Kernels still queued keep their own reference.
    std::erase_if(k.by_stub, [&](const auto& entry) { return entry.second->module == fatCubinHandle; });
    std::erase_if(k.by_handle, [&](const auto& entry) { return entry.second->module == fatCubinHandle; });
  }
  delete fatCubinHandle;
}

void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* deviceFun, const char* deviceName,
                            int thread_limit, uint3* tid, uint3* bid, dim3* bDim, dim3* gDim, int* wSize) {
  // nvcc passes -1 and nulls for the launch bounds, which the simulation does not enforce.
  (void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
  if (fatCubinHandle && hostFun && deviceName) register_function(fatCubinHandle, hostFun, deviceName);
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) { return get_kernel(kernel, hostFun); }

// The public twin of __cudaGetKernel.
cudaError_t cudaGetKernel(cudaKernel_t* kernelPtr, const void* entryFuncAddr) {
  return get_kernel(kernelPtr, entryFuncAddr);
}

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st* stream) {
  tls_configurations.push_back({gridDim, blockDim, sharedMem, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream) {
  if (tls_configurations.empty()) return record_error(cudaErrorInvalidConfiguration);
  const CallConfiguration c = tls_configurations.back();
  tls_configurations.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shared;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

// ---------------- launches ----------------
// Each entry point launches directly, never through another exported one: a profiler that
// interposes several of them sees each launch once, as with the real library.

cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                             cudaStream_t stream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, [&]() -> cudaError_t {
    (void)args;
    return launch(func, gridDim, blockDim, sharedMem, stream, false);
  });
}
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                  cudaStream_t stream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, [&]() -> cudaError_t {
    (void)args;
    return launch(func, gridDim, blockDim, sharedMem, per_thread(stream), false);
  });
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                               cudaStream_t stream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000, [&]() -> cudaError_t {
    (void)args;
    return launch(kernel, gridDim, blockDim, sharedMem, stream, false);
  });
}
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                    cudaStream_t stream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000, [&]() -> cudaError_t {
    (void)args;
    return launch(kernel, gridDim, blockDim, sharedMem, per_thread(stream), false);
  });
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, [&]() -> cudaError_t {
    (void)args;
    return launch_ex(config, func, config ? config->stream : nullptr);
  });
}
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060, [&]() -> cudaError_t {
    (void)args;
    return launch_ex(config, func, per_thread(config ? config->stream : nullptr));
  });
}

cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                        cudaStream_t stream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000, [&]() -> cudaError_t {
    (void)args;
    return launch(func, gridDim, blockDim, sharedMem, stream, true);
  });
}
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                             size_t sharedMem, cudaStream_t stream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000, [&]() -> cudaError_t {
    (void)args;
    return launch(func, gridDim, blockDim, sharedMem, per_thread(stream), true);
  });
}

// ---------------- simulation extensions ----------------

cudaError_t simcudaSetKernelDuration(const void* func, unsigned long long ns) {
  auto k = find_kernel(func);
  if (!k) return record_error(cudaErrorInvalidDeviceFunction);
  k->duration_ns.store(ns);
  return cudaSuccess;
}

cudaError_t simcudaRegisterKernel(const char* deviceName, unsigned long long ns, const void** hostFun) {
  if (!deviceName || !*deviceName || !hostFun) return record_error(cudaErrorInvalidValue);
  // What an nvcc-compiled module's registration does, with a byte of its own standing for the
  // host stub; the module stays registered for the life of the process.
  static const __fatBinC_Wrapper_t wrapper{FATBINC_MAGIC, FATBINC_VERSION, nullptr, nullptr};
  void** module = register_module(const_cast<__fatBinC_Wrapper_t*>(&wrapper));
  const char* stub = new char{};
  register_function(module, stub, deviceName)->duration_ns.store(ns);
  *hostFun = stub;
  return cudaSuccess;
}

}  // extern "C"
