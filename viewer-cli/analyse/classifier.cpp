#include "analyse/classifier.hpp"

#include <fmt/format.h>

#include <array>
#include <string_view>

#include "trainshim/python_files.hpp"

namespace trainshim::cli {

namespace {

// Which copy a rule applies to: the copy itself, or the copy the wait follows.
enum class Needs { Any, DeviceToHost, HostToDevice };

// A frame pattern is a whole qualified name ("at::_ops::item::call"), a scope ending in "::"
// (every member of it) or "scope::*::name" (a member `name` anywhere below scope).
struct Rule {
  std::string_view name;
  std::array<std::string_view, 6> frames;
  Needs needs;
  std::string_view operation;
  SyncKind kind;
  std::string_view cause;
  std::string_view advice;
  // Tells apart two lines of one rule (the same operation reached through another op) in its key.
  std::string_view variant{};
};

constexpr std::string_view kExplicitAdvice =
    "needed only if the code measures time or hands data to another stream; otherwise remove it";
constexpr std::string_view kReadLessOften =
    "keep the value on the GPU (accumulate into a tensor) and read it every N steps, or log it asynchronously";
constexpr std::string_view kDataDependentShape = "the result's size depends on the data: the host waits to learn it";
constexpr std::string_view kReadsAValue = "reads a GPU value on the host: waits for every kernel queued before it";

// PyTorch's entry points for each operation (aten/src/ATen/native/*, torch/csrc/cuda/*,
// c10/cuda/*, torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp). The op-entry frames
// at::_ops::<op>::call come first in each line: libtorch_cpu exports them, so they are named even
// where .symtab is stripped; THP*/THCP* binding names are hidden and only a second choice.
constexpr Rule kRules[] = {
    {"torch.cuda.synchronize",
     {"c10::cuda::device_synchronize", "THCPModule_cudaSynchronize"},
     Needs::Any,
     "torch.cuda.synchronize()",
     SyncKind::Explicit,
     "asked for by the code: waits for every stream of the device",
     kExplicitAdvice},
    // CUDAStream::synchronize and CUDAEvent::synchronize are inline in some releases: then only the
    // binding frame is left.
    {"stream.synchronize",
     {"THCPStream_synchronize", "c10::cuda::CUDAStream::synchronize", "c10::cuda::stream_synchronize"},
     Needs::Any,
     "torch.cuda.Stream.synchronize()",
     SyncKind::Explicit,
     "asked for by the code: waits for one stream",
     kExplicitAdvice},
    {"event.synchronize",
     {"THCPEvent_synchronize", "at::cuda::CUDAEvent::synchronize"},
     Needs::Any,
     "torch.cuda.Event.synchronize()",
     SyncKind::Explicit,
     "asked for by the code: waits for one event",
     kExplicitAdvice},
    // WorkNCCL::synchronize / wait (a barrier's currentStream.synchronize(), blocking wait), and
    // ProcessGroupNCCL::barrier where a release waits in it directly.
    {"barrier",
     {"c10d::ProcessGroupNCCL::WorkNCCL::", "c10d::ProcessGroupNCCL::barrier"},
     Needs::Any,
     "dist.barrier() / Work.wait()",
     SyncKind::Explicit,
     "asked for by the code: waits until the collective's work is done on the GPU",
     "a barrier each step serialises every rank; keep it only where ranks must meet (checkpoints, evaluation)"},
    {"unique",
     {"at::_ops::_unique2::call", "at::_ops::_unique::call", "at::_ops::unique_dim::call",
      "at::_ops::unique_consecutive::call", "at::_ops::unique_dim_consecutive::call"},
     Needs::Any,
     "torch.unique()",
     SyncKind::Hidden,
     kDataDependentShape,
     "pass a known upper bound or keep a fixed-size bincount/one-hot instead of unique() in the loop"},
    {"repeat_interleave",
     {"at::_ops::repeat_interleave_Tensor::call", "at::_ops::repeat_interleave_self_Tensor::call"},
     Needs::Any,
     "torch.repeat_interleave()",
     SyncKind::Hidden,
     kDataDependentShape,
     "pass output_size= (the total, known on the host) so that repeat_interleave need not read it back"},
    {"equal",
     {"at::_ops::equal::call"},
     Needs::Any,
     "torch.equal()",
     SyncKind::Hidden,
     "returns a Python bool: reads the comparison's result on the host",
     "compare on the GPU ((a == b).all() kept as a tensor) and read the result only when needed"},
    {"bincount",
     {"at::_ops::bincount::call"},
     Needs::Any,
     "torch.bincount()",
     SyncKind::Hidden,
     "reads the input's maximum on the host to size the result",
     "pass minlength= and clamp the input, or use scatter_add_ into a fixed-size tensor"},
    {"histc",
     {"at::_ops::histc::call"},
     Needs::Any,
     "torch.histc()",
     SyncKind::Hidden,
     "reads the input's range on the host when min and max are not given",
     "pass min= and max= explicitly"},
    {"bool",
     {"at::_ops::is_nonzero::call", "at::native::is_nonzero", "torch::autograd::THPVariable_bool_scalar"},
     Needs::Any,
     "bool(tensor) / if tensor:",
     SyncKind::Hidden,
     "a Python truth test on a GPU tensor reads it on the host",
     "compare on the GPU (torch.where) instead of branching on a tensor in Python"},
    {"item",
     {"at::_ops::item::call", "at::_ops::_local_scalar_dense::call", "torch::autograd::THPVariable_item",
      "at::native::_local_scalar_dense", "at::native::_local_scalar_dense_cuda"},
     Needs::Any,
     "Tensor.item()",
     SyncKind::Hidden,
     kReadsAValue,
     kReadLessOften},
    {"tolist",
     {"torch::utils::tensor_to_list", "torch::autograd::THPVariable_tolist"},
     Needs::Any,
     "Tensor.tolist()",
     SyncKind::Hidden,
     "copies the tensor to the host and waits for it",
     kReadLessOften},
    {"masked_select",
     {"at::_ops::masked_select::call", "at::native::masked_select_cuda"},
     Needs::Any,
     "masked_select()",
     SyncKind::Hidden,
     kDataDependentShape,
     "keep shapes static: torch.where or multiplying by the mask instead of selecting"},
    {"nonzero",
     {"at::_ops::nonzero::call", "at::_ops::argwhere::call", "at::_ops::nonzero_numpy::call",
      "at::_ops::index_Tensor::call", "at::native::nonzero_cuda"},
     Needs::Any,
     "nonzero() / boolean-mask indexing",
     SyncKind::Hidden,
     kDataDependentShape,
     "keep shapes static: torch.where or multiplying by the mask instead of indexing with it"},
    {"empty_cache",
     {"c10::cuda::CUDACachingAllocator::emptyCache", "c10::cuda::CUDACachingAllocator::*::emptyCache",
      "THCPModule_emptyCache"},
     Needs::Any,
     "torch.cuda.empty_cache()",
     SyncKind::Hidden,
     "returns cached blocks to CUDA, which first waits for the whole device",
     "do not call torch.cuda.empty_cache() inside the training loop"},
    {"allocator",
     {"c10::cuda::CUDACachingAllocator::"},
     Needs::Any,
     "caching-allocator flush (out of cached memory)",
     SyncKind::Hidden,
     "the caching allocator ran out of cached memory and waited for the device to release blocks",
     "lower peak memory (smaller batch, activation checkpointing); expandable_segments:True only makes such flushes "
     "rarer"},
    {"cpu",
     {"at::_ops::_to_copy::call", "at::native::_to_copy", "torch::autograd::THPVariable_cpu"},
     Needs::DeviceToHost,
     "Tensor.cpu() / .to('cpu')",
     SyncKind::Hidden,
     "a blocking copy to the host waits for the kernels that produce the tensor",
     "move results to the host less often, or copy with non_blocking=True into pinned memory and synchronise once"},
    {"cpu",
     {"at::_ops::copy_::call", "at::native::copy_"},
     Needs::DeviceToHost,
     "Tensor.copy_() into a host tensor",
     SyncKind::Hidden,
     "a blocking copy to the host waits for the kernels that produce the tensor",
     "copy with non_blocking=True into pinned memory and synchronise once where the value is needed",
     "copy_"},
    // copy_kernel_cuda follows every blocking copy with a stream sync, uploads too.
    {"upload",
     {"at::_ops::_to_copy::call", "at::native::_to_copy", "torch::autograd::THPVariable_cuda"},
     Needs::HostToDevice,
     "Tensor.to('cuda') / .cuda() (blocking upload)",
     SyncKind::Hidden,
     "a blocking upload (non_blocking=False) waits until the copy has left the host buffer",
     "pin the source (DataLoader(pin_memory=True)) and upload with non_blocking=True"},
    {"upload",
     {"at::_ops::copy_::call", "at::native::copy_"},
     Needs::HostToDevice,
     "Tensor.copy_() from a host tensor (blocking upload)",
     SyncKind::Hidden,
     "a blocking upload (non_blocking=False) waits until the copy has left the host buffer",
     "pin the source and copy with non_blocking=True",
     "copy_"},
};

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

bool matches(std::string_view name, std::string_view pattern) {
  if (pattern.empty()) return false;
  if (pattern.ends_with("::")) return name.starts_with(pattern);
  if (const auto star = pattern.find("::*::"); star != std::string_view::npos) {
    const std::string_view scope = pattern.substr(0, star + 2), member = pattern.substr(star + 3);
    return name.size() > scope.size() + member.size() && name.starts_with(scope) && name.ends_with(member);
  }
  return name == pattern;
}

bool direction_fits(Needs needs, const SyncShape& shape) {
  const Direction copy = shape.api_class == ApiClass::Copy ? shape.direction : shape.follows_copy;
  switch (needs) {
    case Needs::Any:
      return true;
    case Needs::DeviceToHost:
      return copy == Direction::DeviceToHost;
    case Needs::HostToDevice:
      return copy == Direction::HostToDevice;
  }
  return false;
}

Classification from(const Rule& rule, const std::string& frame) {
  std::string key(rule.name);
  if (!rule.variant.empty()) (key += '/') += rule.variant;
  return {std::string(rule.operation), rule.kind, std::string(rule.cause), std::string(rule.advice), frame,
          std::string(rule.name),      key};
}

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

// The library call the user's line made went through `file` (a path's tail): one of the library
// frames inside the innermost user frame is there.
bool called_through(const SyncShape& shape, std::string_view file) {
  for (const auto& frame : shape.python) {
    if (!is_library_python_frame(frame.file, frame.function)) return false;
    if (frame.file.ends_with(file)) return true;
  }
  return false;
}

// torch/_tensor_str.py formats a CUDA tensor with masked_select, then one truth test and one
// item() per element (_Formatter.__init__): one print is many syncs under one user line.
bool inside_tensor_printing(const SyncShape& shape) { return called_through(shape, "torch/_tensor_str.py"); }

// torch/cuda/graphs.py: graph.__enter__ runs torch.cuda.synchronize(), torch.cuda.empty_cache()
// and torch._C._host_emptyCache() before each capture_begin, and make_graphed_callables
// synchronises before its warm-up: syncs the user asked for only by capturing a graph, one site
// at the line that captures.
bool inside_graph_capture(const SyncShape& shape) { return called_through(shape, "torch/cuda/graphs.py"); }

}  // namespace

std::string qualified_name(const std::string& demangled) {
  std::string s = demangled;
  for (std::size_t at; (at = s.find("(anonymous namespace)")) != std::string::npos;) s.replace(at, 21, "{anonymous}");
  // The parameter list starts at the first '(' outside template arguments and lambda braces.
  std::size_t end = s.size();
  int angle = 0, brace = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<') ++angle;
    else if (c == '>' && angle > 0) --angle;
    else if (c == '{') ++brace;
    else if (c == '}' && brace > 0) --brace;
    else if (c == '(' && angle == 0 && brace == 0) {
      end = i;
      break;
    }
  }
  // Drop template arguments, then a return type ("void ns::f<int>(...)").
  std::string name;
  angle = 0;
  for (std::size_t i = 0; i < end; ++i) {
    const char c = s[i];
    if (c == '<') ++angle;
    else if (c == '>' && angle > 0) --angle;
    else if (angle == 0) name += c;
  }
  if (const auto space = name.rfind(' '); space != std::string::npos) name = name.substr(space + 1);
  return name;
}

bool is_poll(const SyncShape& shape) { return shape.api_class == ApiClass::Poll; }

bool is_sync(const SyncShape& shape) {
  return is_host_sync(shape.api_class, shape.direction, shape.host_memory,
                      is_synchronous_copy(shape.api_class, shape.api), shape.null_object);
}

std::string poll_operation(const SyncShape& shape) {
  for (auto frame = shape.native.rbegin(); frame != shape.native.rend(); ++frame) {
    const std::string name = qualified_name(frame->function);
    if (matches(name, "THCPStream_query") || matches(name, "c10::cuda::CUDAStream::query"))
      return "torch.cuda.Stream.query()";
  }
  return shape.api + "()";
}

Classification classify(const SyncShape& shape) {
  if (inside_tensor_printing(shape))
    return {"print/repr of a CUDA tensor",
            SyncKind::Hidden,
            "formatting a CUDA tensor reads it on the host: one sync for the selection, then one per element",
            "print a host copy taken once (t.cpu()) or a summary (t.sum().item()), and only every N steps",
            "",
            "print",
            "print"};
  if (inside_graph_capture(shape))
    return {"CUDA graph capture (torch.cuda.graph)",
            SyncKind::Hidden,
            "torch.cuda.graph synchronises the device and empties the caching allocator before each capture",
            "capture the graph once, before the loop, and replay() it each step: every capture waits for the "
            "whole device",
            "",
            "graph_capture",
            "graph_capture"};
  // The outermost framework frame names what the user called: `if t:` runs is_nonzero, which
  // calls item(); masked_select runs nonzero(); unique() reads its size with item().
  for (auto frame = shape.native.rbegin(); frame != shape.native.rend(); ++frame) {
    const std::string name = qualified_name(frame->function);
    for (const Rule& rule : kRules) {
      if (!direction_fits(rule.needs, shape)) continue;
      for (std::string_view pattern : rule.frames)
        if (matches(name, pattern)) return from(rule, frame->function);
    }
  }
  if (called_directly(shape))
    return {shape.api + "()", SyncKind::Explicit,   "called directly by the program", std::string(kExplicitAdvice), "",
            "direct",         "direct/" + shape.api};
  if (shape.api_class == ApiClass::Copy && shape.direction == Direction::DeviceToHost &&
      shape.host_memory == HostMemory::Pageable)
    return {"blocking D2H copy into pageable memory",
            SyncKind::Hidden,
            "a copy into pageable host memory cannot run asynchronously: the host waits for the GPU to reach it",
            "copy into a pinned buffer with non_blocking=True and synchronise once where the value is needed",
            "",
            "pageable_d2h",
            "pageable_d2h/" + shape.api};
  if (shape.api_class == ApiClass::Copy)
    return {shape.api + "() " + std::string(direction_name(shape.direction)),
            SyncKind::Hidden,
            "a synchronous copy returns only once the GPU has reached it",
            "use cudaMemcpyAsync on a stream with pinned host memory and synchronise once",
            "",
            "blocking_copy",
            fmt::format("blocking_copy/{}/{}", shape.api, direction_name(shape.direction))};
  if (shape.api_class == ApiClass::Free)
    return {"cudaFree()",
            SyncKind::Hidden,
            "cudaFree waits for the whole device before releasing memory",
            "allocate once and reuse device buffers instead of freeing them in the loop",
            "",
            "free",
            "free"};
  const std::string module = shape.native.empty() ? std::string() : basename(shape.native.front().module);
  const std::string where = module.empty() ? std::string("an unknown library") : module;
  return {shape.api + "() in " + where,
          SyncKind::Hidden,
          "a library call that waits for the GPU",
          "look at the native frame that calls it; trainshim has no rule for this library yet",
          shape.native.empty() ? "" : shape.native.front().function,
          "unclassified",
          fmt::format("unclassified/{}/{}", shape.api, module)};
}

int top_user_python_frame(const std::vector<PythonFrameView>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i)
    if (!is_library_python_frame(frames[i].file, frames[i].function)) return int(i);
  return frames.empty() ? -1 : 0;
}

int top_user_native_frame(const std::vector<NativeFrameView>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i)
    if (!frames[i].module.empty() && !is_shared_library(frames[i].module)) return int(i);
  return frames.empty() ? -1 : 0;
}

}  // namespace trainshim::cli
