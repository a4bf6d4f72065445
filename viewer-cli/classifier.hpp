#pragma once
// What operation a host/GPU synchronisation was, from its native frames and its own shape. The
// rules are data (classifier.cpp, kRules): one line per operation; the outermost matching frame
// wins, then the first rule in the table.
#include <string>
#include <vector>

namespace trainshim::cli {

struct NativeFrameView {
  std::string module;    // path of the module, empty if unknown
  std::string function;  // demangled, empty if unknown
  std::string file;
  int line = 0;
};

struct PythonFrameView {
  std::string file, function, source;
  int line = 0;
};

struct SyncShape {
  std::string api;          // cudaStreamSynchronize, cudaMemcpyAsync, ...
  std::string api_class;    // sync | copy | free | poll | collective
  std::string direction;    // for copies
  std::string host_memory;  // for copies
  std::vector<NativeFrameView> native;  // innermost (the caller of the API) first
  std::vector<PythonFrameView> python;  // innermost first
};

enum class SyncKind { Hidden, Explicit };

struct Classification {
  std::string operation;     // what the user wrote: "Tensor.item()", "torch.cuda.synchronize()", ...
  SyncKind kind = SyncKind::Hidden;
  std::string cause;         // why it waits, in plain words
  std::string advice;        // what to do about it
  std::string native_frame;  // the frame that identified it, empty when the shape alone did
  std::string rule;          // the rule's name, for tests and --json
};

Classification classify(const SyncShape& shape);

// Whether the call is a synchronisation at all (a pinned or device copy is not).
bool is_sync(const SyncShape& shape);

// The user's own frame: the innermost Python frame outside the standard library and installed
// packages; for a program without Python, the innermost native frame of the program itself.
// Returns -1 when there is none.
int top_user_python_frame(const std::vector<PythonFrameView>& frames);
int top_user_native_frame(const std::vector<NativeFrameView>& frames);

}  // namespace trainshim::cli
