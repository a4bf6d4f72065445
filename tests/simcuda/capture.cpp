// Stream capture and graphs, with the rules the real runtime enforces around a capture (CUDA 13
// cuda_runtime_api.h: cudaStreamBeginCapture, cudaThreadExchangeStreamCaptureMode,
// cudaStreamIsCapturing; Programming Guide, "Prohibited and Unhandled Operations"):
// - work enqueued on a capturing stream is recorded into its graph, not run;
// - a thread whose mode forbids "potentially unsafe" calls (cudaMalloc, event and stream queries
//   and synchronisations, ...) gets cudaErrorStreamCaptureUnsupported from them, and the captures
//   that forbade the call are invalidated: cudaStreamEndCapture then fails with
//   cudaErrorStreamCaptureInvalidated. In global mode (every thread's default) another thread's
//   global capture forbids them too; that is how a watchdog thread's cudaEventQuery breaks a
//   capture (pytorch#104487, fixed in ProcessGroupNCCL by pytorch#148594);
// - the legacy stream encompasses the blocking streams of its device: using it while one of them
//   captures fails with cudaErrorStreamCaptureImplicit and invalidates that capture, and
//   cudaStreamIsCapturing on it answers cudaErrorStreamCaptureImplicit without invalidating.
// Not simulated: captures that fork into other streams through events (cross-stream joins).
#include "internal.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_set>

namespace simcuda {
namespace {

thread_local cudaStreamCaptureMode tls_mode = cudaStreamCaptureModeGlobal;

struct Captures {
  std::mutex mu;
  std::vector<std::shared_ptr<CaptureSequence>> active;
  std::unordered_set<Graph*> graphs;
  std::unordered_set<Graph*> executables;  // an instantiated graph is a copy of the nodes
  std::atomic<unsigned long long> next_id{1};
};

// Leaked on purpose, like the stream handles: workers may outlive static destruction.
Captures& captures() {
  static Captures* c = new Captures;
  return *c;
}

// Whether a blocking (non-legacy) stream of the device is capturing; the caller holds the lock.
bool blocking_capture_on(Captures& c, int device) {
  return std::any_of(c.active.begin(), c.active.end(),
                     [&](const auto& seq) { return seq->device == device && seq->origin->blocking(); });
}

void invalidate_blocking_captures(Captures& c, int device) {
  for (auto& seq : c.active)
    if (seq->device == device && seq->origin->blocking()) seq->invalidated = true;
}

}  // namespace

std::shared_ptr<CaptureSequence> capture_of(const Stream& s) {
  std::lock_guard lock(captures().mu);
  return s.capture;
}

std::shared_ptr<CaptureSequence> active_capture(std::uint64_t id) {
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  for (auto& seq : c.active)
    if (seq->id == id) return seq;
  return nullptr;
}

void invalidate(CaptureSequence& seq) {
  std::lock_guard lock(captures().mu);
  seq.invalidated = true;
}

cudaError_t check_potentially_unsafe() {
  if (tls_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  Captures& c = captures();
  const auto me = std::this_thread::get_id();
  bool forbidden = false;
  std::lock_guard lock(c.mu);
  for (auto& seq : c.active) {
    const bool own = seq->thread == me && seq->mode != cudaStreamCaptureModeRelaxed;
    const bool foreign_global =
        tls_mode == cudaStreamCaptureModeGlobal && seq->thread != me && seq->mode == cudaStreamCaptureModeGlobal;
    if (own || foreign_global) {
      seq->invalidated = true;
      forbidden = true;
    }
  }
  return forbidden ? record_error(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t check_wait_on(const std::shared_ptr<Stream>& s) {
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (s->legacy() && blocking_capture_on(c, s->device())) {
    invalidate_blocking_captures(c, s->device());
    return record_error(cudaErrorStreamCaptureImplicit);
  }
  if (s->capture) {
    s->capture->invalidated = true;
    return record_error(cudaErrorStreamCaptureUnsupported);
  }
  return cudaSuccess;
}

cudaError_t check_device_wait(int device) {
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  bool capturing = false;
  for (auto& seq : c.active)
    if (seq->device == device) {
      seq->invalidated = true;
      capturing = true;
    }
  return capturing ? record_error(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t submit_work(const std::shared_ptr<Stream>& s, Work work, std::uint64_t* ticket) {
  *ticket = 0;
  {
    Captures& c = captures();
    std::lock_guard lock(c.mu);
    if (s->legacy() && blocking_capture_on(c, s->device())) {
      invalidate_blocking_captures(c, s->device());
      return record_error(cudaErrorStreamCaptureImplicit);
    }
    if (s->capture) {
      if (s->capture->invalidated) return record_error(cudaErrorStreamCaptureInvalidated);
      s->capture->graph->nodes.push_back(std::move(work));
      return cudaSuccess;
    }
  }
  *ticket = enqueue(s, work(*s));
  return cudaSuccess;
}

}  // namespace simcuda

using namespace simcuda;

namespace {

Graph* graph_of(cudaGraph_t g) { return reinterpret_cast<Graph*>(g); }
Graph* executable_of(cudaGraphExec_t g) { return reinterpret_cast<Graph*>(g); }

// cudaStreamIsCapturing and cudaStreamGetCaptureInfo; id and graph are written only for an active
// capture.
cudaError_t capture_status(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id,
                           cudaGraph_t* graph) {
  auto s = resolve_stream(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  if (!status) return record_error(cudaErrorInvalidValue);
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  // The blocking stream's capture is not invalidated by this query.
  if (s->legacy() && blocking_capture_on(c, s->device())) return record_error(cudaErrorStreamCaptureImplicit);
  *status = !s->capture               ? cudaStreamCaptureStatusNone
            : s->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
  if (*status == cudaStreamCaptureStatusActive) {
    if (id) *id = s->capture->id;
    if (graph) *graph = reinterpret_cast<cudaGraph_t>(s->capture->graph);
  }
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  if (!mode || *mode < cudaStreamCaptureModeGlobal || *mode > cudaStreamCaptureModeRelaxed)
    return record_error(cudaErrorInvalidValue);
  std::swap(tls_mode, *mode);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  if (mode < cudaStreamCaptureModeGlobal || mode > cudaStreamCaptureModeRelaxed)
    return record_error(cudaErrorInvalidValue);
  auto s = resolve_stream(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  // "Capture may not be initiated if stream is cudaStreamLegacy."
  if (s->legacy()) return record_error(cudaErrorStreamCaptureUnsupported);
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (s->capture) return record_error(cudaErrorIllegalState);
  auto seq = std::make_shared<CaptureSequence>(
      CaptureSequence{c.next_id++, mode, std::this_thread::get_id(), s.get(), s->device(), false, new Graph});
  c.graphs.insert(seq->graph);
  c.active.push_back(seq);
  s->capture = seq;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (!pGraph) return record_error(cudaErrorInvalidValue);
  auto s = resolve_stream(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  auto seq = s->capture;
  if (!seq) return record_error(cudaErrorIllegalState);
  if (seq->origin != s.get()) return record_error(cudaErrorStreamCaptureUnmatched);
  if (seq->mode != cudaStreamCaptureModeRelaxed && seq->thread != std::this_thread::get_id())
    return record_error(cudaErrorStreamCaptureWrongThread);
  s->capture.reset();
  c.active.erase(std::find(c.active.begin(), c.active.end(), seq));
  if (seq->invalidated) {
    c.graphs.erase(seq->graph);
    delete seq->graph;
    *pGraph = nullptr;
    return record_error(cudaErrorStreamCaptureInvalidated);
  }
  *pGraph = reinterpret_cast<cudaGraph_t>(seq->graph);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus) {
  return capture_status(stream, pCaptureStatus, nullptr, nullptr);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out, const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  const cudaError_t status = capture_status(stream, captureStatus_out, id_out, graph_out);
  if (status != cudaSuccess) return status;
  // Nodes are not simulated: the next captured node depends on nothing the caller can name.
  if (dependencies_out) *dependencies_out = nullptr;
  if (edgeData_out) *edgeData_out = nullptr;
  if (numDependencies_out) *numDependencies_out = 0;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  (void)flags;
  if (!pGraphExec) return record_error(cudaErrorInvalidValue);
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (!c.graphs.count(graph_of(graph))) return record_error(cudaErrorInvalidValue);
  auto* exec = new Graph(*graph_of(graph));
  c.executables.insert(exec);
  *pGraphExec = reinterpret_cast<cudaGraphExec_t>(exec);
  return cudaSuccess;
}

// What PyTorch's CUDAGraph::capture_end calls (with cudaGraphInstantiateFlagAutoFreeOnLaunch);
// the flags change nothing here.
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiate(pGraphExec, graph, flags);
}

}  // extern "C"

namespace {

cudaError_t launch_graph(cudaGraphExec_t graphExec, cudaStream_t stream) {
  auto s = resolve_stream(stream);
  if (!s) return record_error(cudaErrorInvalidResourceHandle);
  std::vector<Work> nodes;
  {
    Captures& c = captures();
    std::lock_guard lock(c.mu);
    if (!c.executables.count(executable_of(graphExec))) return record_error(cudaErrorInvalidValue);
    nodes = executable_of(graphExec)->nodes;
  }
  // One launch, as a GPU takes it: the stream runs the graph's nodes back to back, and the host
  // does not queue them one by one (2,000 separate launches would make the replay as slow as
  // launching them, on the host, where a GPU's replay costs the host microseconds). The kernels,
  // copies and memsets it replays carry the cudaGraphLaunch's correlation id (its ApiCall's).
  Work replay = [nodes = std::move(nodes)](const Stream& on) {
    std::vector<std::function<void()>> ops;
    ops.reserve(nodes.size());
    for (const Work& node : nodes) ops.push_back(node(on));
    return std::function<void()>([ops = std::move(ops)] {
      for (const auto& op : ops) op();
    });
  };
  std::uint64_t ticket = 0;
  return submit_work(s, std::move(replay), &ticket);
}

}  // namespace

extern "C" {

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000);
  return call.returned(launch_graph(graphExec, stream));
}
// Exported by the real library for per-thread-default-stream builds; declared here for the same reason.
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000);
  return call.returned(launch_graph(graphExec, stream ? stream : cudaStreamPerThread));
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (!c.executables.erase(executable_of(graphExec))) return record_error(cudaErrorInvalidValue);
  delete executable_of(graphExec);
  return cudaSuccess;
}

// The count of a graph's nodes (PyTorch's CUDAGraph::capture_end warns on an empty capture);
// nodes themselves are not simulated, so a caller asking for their handles is told so.
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  if (!numNodes) return record_error(cudaErrorInvalidValue);
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (!c.graphs.count(graph_of(graph))) return record_error(cudaErrorInvalidValue);
  if (nodes) return record_error(cudaErrorNotSupported);
  *numNodes = graph_of(graph)->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (!c.graphs.erase(graph_of(graph))) return record_error(cudaErrorInvalidValue);
  delete graph_of(graph);
  return cudaSuccess;
}

}  // extern "C"
