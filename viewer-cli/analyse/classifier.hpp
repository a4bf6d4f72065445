#pragma once
// What operation a host/GPU synchronisation was, from its native and Python frames and its own
// shape. The rules are data (classifier.cpp, kRules): one line per operation, keyed on whole
// function names (PyTorch's op-entry frames `at::_ops::<op>::call` first, since libtorch exports
// them even where the wheel's .symtab is stripped); the outermost matching frame wins.
#include <cstdint>
#include <string>
#include <vector>

#include "store/rows.hpp"
#include "trainshim/api.hpp"

namespace trainshim::cli {

struct SyncShape {
  std::string api;  // cudaStreamSynchronize, cudaMemcpyAsync, ...
  ApiClass api_class = ApiClass::Sync;
  Direction direction = Direction::None;         // for copies
  HostMemory host_memory = HostMemory::Unknown;  // for copies
  // For a wait: the direction of the copy it follows on the same thread and stream (PyTorch's
  // memcpy_and_sync is cudaMemcpyAsync then cudaStreamSynchronize), None when it follows none.
  Direction follows_copy = Direction::None;
  bool null_object = false;             // cudaFree(nullptr): PyTorch's way of creating the context, no wait
  std::vector<NativeFrameView> native;  // innermost (the caller of the API) first
  std::vector<PythonFrameView> python;  // innermost first
};

enum class SyncKind { Hidden, Explicit };

struct Classification {
  std::string operation;  // what the user wrote: "Tensor.item()", "torch.cuda.synchronize()", ...
  SyncKind kind = SyncKind::Hidden;
  std::string cause;         // why it waits, in plain words
  std::string advice;        // what to do about it
  std::string native_frame;  // the frame that identified it, empty when the shape alone did
  std::string rule;          // the rule's name, for tests and --json
  // What names the operation from one version of trainshim to the next (site_identity: baselines,
  // diff), never its words: the rule, and what tells its cases apart ("cpu/copy_",
  // "blocking_copy/cudaMemcpy/D2H", "unclassified/cudaStreamSynchronize/libfoo.so").
  std::string key;
};

Classification classify(const SyncShape& shape);

// A blocking upload's advice where its process's input copies come from pinned memory already (the
// setup checklist's pinned_memory is ok): pinning again is no fix.
inline constexpr const char* kPinnedUploadAdvice =
    "the source is pinned already: pass non_blocking=True so the upload overlaps compute";

// "Did the host wait for the GPU here?": is_host_sync (api.hpp) of the shape, used by every part
// that reports syncs.
bool is_sync(const SyncShape& shape);
bool is_poll(const SyncShape& shape);

// The name a poll site is reported under: torch.cuda.Stream.query() or the API itself.
std::string poll_operation(const SyncShape& shape);

// The qualified name of a demangled function without its return type, template arguments and
// parameters: "at::_ops::is_nonzero::call(at::Tensor const&)" -> "at::_ops::is_nonzero::call".
std::string qualified_name(const std::string& demangled);

// The user's own frame: the innermost Python frame outside the standard library and installed
// packages; for a program without Python, the innermost native frame of the program itself.
// Returns -1 when there is none.
int top_user_python_frame(const std::vector<PythonFrameView>& frames);
int top_user_native_frame(const std::vector<NativeFrameView>& frames);

}  // namespace trainshim::cli
