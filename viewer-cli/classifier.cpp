#include "classifier.hpp"

#include <string_view>

#include "trainshim/python_files.hpp"

namespace trainshim::cli {

namespace {

struct Rule {
  const char* name;
  const char* frame_contains;  // a native frame's demangled name contains this
  bool device_to_host_only;    // applies only to a D2H copy (or a sync after one)
  const char* operation;
  SyncKind kind;
  const char* cause;
  const char* advice;
};

constexpr const char* kExplicitAdvice = "needed only if the code measures time or hands data to another stream; "
                                        "otherwise remove it";
constexpr const char* kReadLessOften = "keep the value on the GPU (accumulate into a tensor) and read it every N "
                                       "steps, or log it asynchronously";

// PyTorch's native entry points for each operation; explicit ones first, since an explicit
// synchronize can sit above a framework frame that would otherwise look hidden.
constexpr Rule kRules[] = {
    {"torch.cuda.synchronize", "c10::cuda::device_synchronize", false, "torch.cuda.synchronize()", SyncKind::Explicit,
     "asked for by the code: waits for every stream of the device", kExplicitAdvice},
    {"torch.cuda.synchronize", "THCPModule_cudaSynchronize", false, "torch.cuda.synchronize()", SyncKind::Explicit,
     "asked for by the code: waits for every stream of the device", kExplicitAdvice},
    {"stream.synchronize", "c10::cuda::CUDAStream::synchronize", false, "torch.cuda.Stream.synchronize()",
     SyncKind::Explicit, "asked for by the code: waits for one stream", kExplicitAdvice},
    {"event.synchronize", "at::cuda::CUDAEvent::synchronize", false, "torch.cuda.Event.synchronize()",
     SyncKind::Explicit, "asked for by the code: waits for one event", kExplicitAdvice},
    {"item", "_local_scalar_dense", false, "Tensor.item()", SyncKind::Hidden,
     "reads a GPU value on the host: waits for every kernel queued before it", kReadLessOften},
    {"bool", "at::native::is_nonzero", false, "bool(tensor) / if tensor:", SyncKind::Hidden,
     "a Python truth test on a GPU tensor reads it on the host", "compare on the GPU (torch.where) instead of branching on a tensor in Python"},
    {"tolist", "tensor_to_list", false, "Tensor.tolist()", SyncKind::Hidden,
     "copies the tensor to the host and waits for it", kReadLessOften},
    {"nonzero", "nonzero", false, "nonzero() / boolean-mask indexing", SyncKind::Hidden,
     "the result's size depends on the data: the host waits to learn it", "keep shapes static: torch.where or multiplying by the mask instead of indexing with it"},
    {"masked_select", "masked_select", false, "masked_select() / boolean-mask indexing", SyncKind::Hidden,
     "the result's size depends on the data: the host waits to learn it", "keep shapes static: torch.where or multiplying by the mask instead of selecting"},
    {"empty_cache", "emptyCache", false, "torch.cuda.empty_cache()", SyncKind::Hidden,
     "returns cached blocks with cudaFree, which waits for the whole device", "do not call torch.cuda.empty_cache() inside the training loop"},
    {"allocator", "CUDACachingAllocator", false, "caching-allocator flush (out of cached memory)", SyncKind::Hidden,
     "the allocator frees cached blocks with cudaFree, which waits for the whole device", "the caching allocator ran out of cached memory: lower peak memory or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
    {"cpu", "at::native::_to_copy", true, "Tensor.cpu() / .to('cpu')", SyncKind::Hidden,
     "a blocking copy to the host waits for the kernels that produce the tensor", "move results to the host less often, or copy with non_blocking=True into pinned memory and synchronise once"},
    {"cpu", "at::native::copy_", true, "Tensor.cpu() / .to('cpu') / .copy_()", SyncKind::Hidden,
     "a blocking copy to the host waits for the kernels that produce the tensor", "move results to the host less often, or copy with non_blocking=True into pinned memory and synchronise once"},
};

bool contains(const std::string& haystack, const char* needle) { return haystack.find(needle) != std::string::npos; }

std::string basename(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_shared_library(const std::string& module) { return contains(basename(module), ".so"); }

// The API was called by the user's own code: a C++ program's own function, or a Python line
// through ctypes / cffi (the caller's frame is then in the foreign-function library).
bool called_directly(const SyncShape& shape) {
  if (shape.native.empty()) return false;
  const std::string& module = shape.native.front().module;
  if (module.empty()) return false;
  return !is_shared_library(module) || contains(module, "_ctypes") || contains(module, "libffi") ||
         contains(module, "_cffi");
}

}  // namespace

bool is_sync(const SyncShape& shape) {
  if (shape.api_class == "sync" || shape.api_class == "free" || shape.api_class == "poll") return true;
  return shape.api_class == "copy" && shape.direction == "d2h" && shape.host_memory == "pageable";
}

Classification classify(const SyncShape& shape) {
  // The outermost framework frame names what the user called: `if t:` runs is_nonzero, which
  // calls item(); masked_select runs nonzero(); empty_cache() synchronizes the device.
  const bool device_to_host = shape.direction == "d2h" || shape.api_class == "sync";
  for (auto frame = shape.native.rbegin(); frame != shape.native.rend(); ++frame)
    for (const Rule& rule : kRules) {
      if (rule.device_to_host_only && !device_to_host) continue;
      if (contains(frame->function, rule.frame_contains))
        return {rule.operation, rule.kind, rule.cause, rule.advice, frame->function, rule.name};
    }
  if (called_directly(shape))
    return {shape.api + "()", SyncKind::Explicit, "called directly by the program", kExplicitAdvice, "", "direct"};
  if (shape.api_class == "copy")
    return {"blocking D2H copy into pageable memory", SyncKind::Hidden,
            "a copy into pageable host memory cannot run asynchronously: the host waits for the GPU to reach it",
            "copy into a pinned buffer with non_blocking=True and synchronise once where the value is needed", "",
            "pageable_d2h"};
  if (shape.api_class == "free")
    return {"cudaFree()", SyncKind::Hidden, "cudaFree waits for the whole device before releasing memory",
            "allocate once and reuse device buffers instead of freeing them in the loop", "", "free"};
  const std::string module = shape.native.empty() ? std::string() : basename(shape.native.front().module);
  const std::string where = module.empty() ? std::string("an unknown library") : module;
  return {shape.api + "() in " + where, SyncKind::Hidden, "a library call that waits for the GPU",
          "look at the native frame that calls it; trainshim has no rule for this library yet",
          shape.native.empty() ? "" : shape.native.front().function, "unclassified"};
}

int top_user_python_frame(const std::vector<PythonFrameView>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i)
    if (!is_library_python_file(frames[i].file)) return int(i);
  return frames.empty() ? -1 : 0;
}

int top_user_native_frame(const std::vector<NativeFrameView>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i)
    if (!frames[i].module.empty() && !is_shared_library(frames[i].module)) return int(i);
  return frames.empty() ? -1 : 0;
}

}  // namespace trainshim::cli
