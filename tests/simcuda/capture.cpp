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
bool blockingCaptureOn(Captures& c, int device) {
  return std::any_of(c.active.begin(), c.active.end(), [&](const auto& seq) {
    return seq->device == device && seq->origin->blocking();
  });
}

void invalidateBlockingCaptures(Captures& c, int device) {
  for (auto& seq : c.active)
    if (seq->device == device && seq->origin->blocking()) seq->invalidated = true;
}

}  // namespace

std::shared_ptr<CaptureSequence> captureOf(const Stream& s) {
  std::lock_guard lock(captures().mu);
  return s.capture;
}

std::shared_ptr<CaptureSequence> activeCapture(std::uint64_t id) {
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

cudaError_t checkPotentiallyUnsafe() {
  if (tls_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  Captures& c = captures();
  const auto me = std::this_thread::get_id();
  bool forbidden = false;
  std::lock_guard lock(c.mu);
  for (auto& seq : c.active) {
    const bool own = seq->thread == me && seq->mode != cudaStreamCaptureModeRelaxed;
    const bool foreign_global = tls_mode == cudaStreamCaptureModeGlobal && seq->thread != me &&
                                seq->mode == cudaStreamCaptureModeGlobal;
    if (own || foreign_global) {
      seq->invalidated = true;
      forbidden = true;
    }
  }
  return forbidden ? recordError(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t checkWaitOn(const std::shared_ptr<Stream>& s) {
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (s->legacy() && blockingCaptureOn(c, s->device())) {
    invalidateBlockingCaptures(c, s->device());
    return recordError(cudaErrorStreamCaptureImplicit);
  }
  if (s->capture) {
    s->capture->invalidated = true;
    return recordError(cudaErrorStreamCaptureUnsupported);
  }
  return cudaSuccess;
}

cudaError_t checkDeviceWait(int device) {
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  bool capturing = false;
  for (auto& seq : c.active)
    if (seq->device == device) {
      seq->invalidated = true;
      capturing = true;
    }
  return capturing ? recordError(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t submitWork(const std::shared_ptr<Stream>& s, Work work, std::uint64_t* ticket) {
  *ticket = 0;
  {
    Captures& c = captures();
    std::lock_guard lock(c.mu);
    if (s->legacy() && blockingCaptureOn(c, s->device())) {
      invalidateBlockingCaptures(c, s->device());
      return recordError(cudaErrorStreamCaptureImplicit);
    }
    if (s->capture) {
      if (s->capture->invalidated) return recordError(cudaErrorStreamCaptureInvalidated);
      s->capture->graph->nodes.push_back(std::move(work));
      return cudaSuccess;
    }
  }
  *ticket = enqueue(s, work());
  return cudaSuccess;
}

}  // namespace simcuda

using namespace simcuda;

namespace {

Graph* graphOf(cudaGraph_t g) { return reinterpret_cast<Graph*>(g); }
Graph* executableOf(cudaGraphExec_t g) { return reinterpret_cast<Graph*>(g); }

// cudaStreamIsCapturing and cudaStreamGetCaptureInfo; id and graph are written only for an active
// capture.
cudaError_t captureStatus(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id,
                          cudaGraph_t* graph) {
  auto s = resolveStream(stream);
  if (!s) return recordError(cudaErrorInvalidResourceHandle);
  if (!status) return recordError(cudaErrorInvalidValue);
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  // The blocking stream's capture is not invalidated by this query.
  if (s->legacy() && blockingCaptureOn(c, s->device())) return recordError(cudaErrorStreamCaptureImplicit);
  *status = !s->capture                ? cudaStreamCaptureStatusNone
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
    return recordError(cudaErrorInvalidValue);
  std::swap(tls_mode, *mode);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  if (mode < cudaStreamCaptureModeGlobal || mode > cudaStreamCaptureModeRelaxed)
    return recordError(cudaErrorInvalidValue);
  auto s = resolveStream(stream);
  if (!s) return recordError(cudaErrorInvalidResourceHandle);
  // "Capture may not be initiated if stream is cudaStreamLegacy."
  if (s->legacy()) return recordError(cudaErrorStreamCaptureUnsupported);
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (s->capture) return recordError(cudaErrorIllegalState);
  auto seq = std::make_shared<CaptureSequence>(CaptureSequence{c.next_id++, mode, std::this_thread::get_id(), s.get(),
                                                               s->device(), false, new Graph});
  c.graphs.insert(seq->graph);
  c.active.push_back(seq);
  s->capture = seq;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (!pGraph) return recordError(cudaErrorInvalidValue);
  auto s = resolveStream(stream);
  if (!s) return recordError(cudaErrorInvalidResourceHandle);
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  auto seq = s->capture;
  if (!seq) return recordError(cudaErrorIllegalState);
  if (seq->origin != s.get()) return recordError(cudaErrorStreamCaptureUnmatched);
  if (seq->mode != cudaStreamCaptureModeRelaxed && seq->thread != std::this_thread::get_id())
    return recordError(cudaErrorStreamCaptureWrongThread);
  s->capture.reset();
  c.active.erase(std::find(c.active.begin(), c.active.end(), seq));
  if (seq->invalidated) {
    c.graphs.erase(seq->graph);
    delete seq->graph;
    *pGraph = nullptr;
    return recordError(cudaErrorStreamCaptureInvalidated);
  }
  *pGraph = reinterpret_cast<cudaGraph_t>(seq->graph);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus) {
  return captureStatus(stream, pCaptureStatus, nullptr, nullptr);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out, const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  const cudaError_t status = captureStatus(stream, captureStatus_out, id_out, graph_out);
  if (status != cudaSuccess) return status;
  // Nodes are not simulated: the next captured node depends on nothing the caller can name.
  if (dependencies_out) *dependencies_out = nullptr;
  if (edgeData_out) *edgeData_out = nullptr;
  if (numDependencies_out) *numDependencies_out = 0;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  (void)flags;
  if (!pGraphExec) return recordError(cudaErrorInvalidValue);
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (!c.graphs.count(graphOf(graph))) return recordError(cudaErrorInvalidValue);
  auto* exec = new Graph(*graphOf(graph));
  c.executables.insert(exec);
  *pGraphExec = reinterpret_cast<cudaGraphExec_t>(exec);
  return cudaSuccess;
}

// What PyTorch's CUDAGraph::capture_end calls (with cudaGraphInstantiateFlagAutoFreeOnLaunch);
// the flags change nothing here.
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  return cudaGraphInstantiate(pGraphExec, graph, flags);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  auto s = resolveStream(stream);
  if (!s) return recordError(cudaErrorInvalidResourceHandle);
  std::vector<Work> nodes;
  {
    Captures& c = captures();
    std::lock_guard lock(c.mu);
    if (!c.executables.count(executableOf(graphExec))) return recordError(cudaErrorInvalidValue);
    nodes = executableOf(graphExec)->nodes;
  }
  for (auto& node : nodes) {
    std::uint64_t ticket = 0;
    if (const cudaError_t e = submitWork(s, node, &ticket); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (!c.executables.erase(executableOf(graphExec))) return recordError(cudaErrorInvalidValue);
  delete executableOf(graphExec);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  Captures& c = captures();
  std::lock_guard lock(c.mu);
  if (!c.graphs.erase(graphOf(graph))) return recordError(cudaErrorInvalidValue);
  delete graphOf(graph);
  return cudaSuccess;
}

}  // extern "C"
