#pragma once
// The shim–collector contract: the layout of a process's shared-memory segment and of the event
// record. A segment is written by one process (the shim) and read by the collector, which treats
// every byte as untrusted and validates it (validate_header, validate_record).
//
// Segment layout:  [SegmentHeader][RingControl, Slot x first_ring_capacity]
//                  [RingControl, Slot x ring_capacity] x (ring_count - 1)
//                  [RingControl, SideSlot x side_capacity]
// The first ring is the one the first thread to record takes: in a training process that thread
// (Python's main thread) makes almost every call, so its ring is the one sized to last while the
// collector commits, without making every ring that large.
// Event records are fixed-size and frequent; side records (stacks, modules, strings) are large,
// written once per distinct value and referred to by id from the events.
//
// Liveness: the producer holds a POSIX read lock (fcntl F_SETLK, F_RDLCK) on byte 0 of its
// segment from before it publishes the header until its image ends: the kernel drops the lock at
// exit (also a kill) and at exec (the descriptor is close-on-exec), and a forked child does not
// inherit it. The collector only asks (F_OFD_GETLK) and never takes a lock, so the answer holds
// across pid namespaces (containers sharing /dev/shm), where pids say nothing.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "trainshim/api.hpp"

namespace trainshim {

inline constexpr uint64_t kSegmentMagic = 0x314753485352'5254ULL;  // the bytes "TRRSHSG1" (little-endian)
inline constexpr uint32_t kFormatVersion = 9;  // 9: the sampler (sampler, sample_hz, samples_torn, Facts)

enum class ClockKind : uint32_t { Tsc = 1, Monotonic = 2 };

// One call to an interposed function. The meaning of the generic fields per ApiClass:
//   Copy            bytes copied, stream, direction, host_memory of the host side
//   Sync            stream waited for (0 = device), object = event for cudaEventSynchronize
//   Pinned*         object = host address, bytes = size
//   Collective      bytes = count x element size, object = communicator id (the same on every
//                   rank), stream, detail = reduction op << 8 | data type, rank_in_comm,
//                   comm_size, sequence (the collective's number on the communicator; the calls
//                   of one group share it), flags (CollectiveFlag). Point-to-point (flag
//                   PointToPoint): peer = the other rank, sequence = the call's number among
//                   this rank's sends to (or receives from) that peer on the communicator
//   CollectiveTiming written by the shim once the GPU finished a collective: object, rank_in_comm,
//                   comm_size, sequence, peer, flags as the collective's; detail = GPU-side
//                   duration in ns (of the whole group for a grouped call); begin/end_ticks = the
//                   collective call's
//   GroupEnd        the outermost end of an NCCL group: flags = InProgress (launched on NCCL's
//                   thread) or Simulated (launched nowhere), detail = the group's operations (a
//                   collective number of a communicator, or a communicator's point-to-point calls)
//   CommInit        object = communicator handle, detail = communicator id (hash of the unique
//                   id; for a split, of the parent's id, the colour and the split's number),
//                   rank_in_comm, comm_size
//   CommEnd         object = communicator handle
//   Launch          the first kernel or graph launch on its thread since that thread's last host sync:
//                   stream, object = the kernel function (or graph exec) as an integer
//   GpuKernel       written by the shim from a CUPTI activity record: begin/end_ticks = the kernel's
//                   start and end on the GPU, on the segment's clock; stream = CUPTI's stream id;
//                   object = CUPTI's correlation id (of the launching call); detail = the kernel
//                   name's String id; sequence = the device
//   GpuCopy         as GpuKernel, detail = 0; bytes, direction, host_memory (from CUPTI's memory kinds)
//   GpuSet          as GpuKernel, detail = 0; bytes
//   Sample          written by the shim's sampler thread, one per thread looked at in one tick:
//                   tid = the thread looked at (not the sampler's); begin/end_ticks = when reading
//                   it began and ended; python_stack = its Python stack (0: none: no Python frames,
//                   no Python, or the read was torn and counted in samples_torn); object = its state
//                   as /proc/<pid>/task/<tid>/stat says it ('R' running, 'S' sleeping, 'D' disk
//                   wait, ...; 0 unknown); detail = the system call it is blocked in + 1, from
//                   /proc/<pid>/task/<tid>/syscall (0: running, or not known); sequence = the
//                   sampler's tick, from 1 (the threads of one tick share it)
//   ProcessSample   written by the sampler about once a second: bytes = threads in the process;
//                   object = DataLoader worker processes alive (children whose name is
//                   "pt_data_worker", or "pt_multiprocess" as newer PyTorch names them); detail = their CPU time
//                   in ns (user + system, of the workers alive); sequence = distinct worker
//                   processes seen since recording started (more than alive: re-forked each epoch);
//                   rank_in_comm = other child processes alive
//   GpuWindow       written by the shim when it turned the GPU timeline on (gpuTimelineOn) or off
//                   (gpuTimelineOff): begin_ticks = end_ticks = when CUPTI's activity kinds were
//                   enabled or disabled; tid = the thread that turned them
struct EventRecord {
  uint64_t begin_ticks;  // clock reading on entry (ClockKind of the segment)
  uint64_t end_ticks;    // clock reading when the real function returned
  uint64_t bytes;
  uint64_t stream;  // cudaStream_t as an integer
  uint64_t object;
  uint64_t detail;
  uint32_t tid;           // kernel thread id of the caller
  uint32_t native_stack;  // 0: none captured
  uint32_t python_stack;  // 0: none captured
  int32_t result;         // the real function's return code
  uint32_t rank_in_comm;
  uint32_t comm_size;
  uint16_t api;         // Api
  uint8_t direction;    // Direction
  uint8_t host_memory;  // HostMemory
  uint32_t sequence;    // collectives: see above; 0 otherwise
  uint32_t peer;        // point-to-point: the peer's rank in the communicator; 0 otherwise
  uint32_t flags;       // CollectiveFlag bits (collectives, their timings, group ends); 0 otherwise
};
static_assert(sizeof(EventRecord) == 88);

// The generic fields read by what they mean for the record's class (the table above); 0 where
// the class does not carry it. A record's api must have passed validate_record.
inline constexpr ApiClass api_class_of(const EventRecord& r) { return kApis[r.api].api_class; }
// The communicator id, the same on every rank: what collectives are matched by across ranks.
inline constexpr uint64_t comm_id(const EventRecord& r) {
  switch (api_class_of(r)) {
    case ApiClass::Collective:
    case ApiClass::CollectiveTiming:
      return r.object;
    case ApiClass::CommInit:
      return r.detail;
    default:
      return 0;
  }
}
// The communicator handle in this process (ncclComm_t as an integer).
inline constexpr uint64_t comm_handle(const EventRecord& r) {
  const ApiClass c = api_class_of(r);
  return c == ApiClass::CommInit || c == ApiClass::CommEnd ? r.object : 0;
}
// A collective's reduction (ncclRedOp_t; 0 for collectives that have none) and data type
// (ncclDataType_t), packed in `detail` by collective_detail.
inline constexpr uint64_t collective_detail(uint32_t op, uint64_t data_type) { return uint64_t{op} << 8 | data_type; }
inline constexpr int collective_op(const EventRecord& r) {
  return api_class_of(r) == ApiClass::Collective ? int(uint32_t(r.detail >> 8)) : 0;
}
inline constexpr int collective_data_type(const EventRecord& r) {
  return api_class_of(r) == ApiClass::Collective ? int(r.detail & 0xff) : 0;
}
// A timing record's GPU-side duration of its collective (of the whole group for a grouped call).
inline constexpr uint64_t gpu_ns(const EventRecord& r) {
  return api_class_of(r) == ApiClass::CollectiveTiming ? r.detail : 0;
}
// A group end's operations: a collective number of a communicator, or a communicator's
// point-to-point calls.
inline constexpr uint64_t group_operations(const EventRecord& r) {
  return api_class_of(r) == ApiClass::GroupEnd ? r.detail : 0;
}

// A GPU activity record's kernel name (String id), its device and CUPTI's correlation id.
inline constexpr uint32_t kernel_name_id(const EventRecord& r) {
  return api_class_of(r) == ApiClass::GpuKernel ? uint32_t(r.detail) : 0;
}
inline constexpr uint32_t gpu_device(const EventRecord& r) { return is_gpu_activity(api_class_of(r)) ? r.sequence : 0; }
inline constexpr uint64_t gpu_correlation(const EventRecord& r) {
  return is_gpu_activity(api_class_of(r)) ? r.object : 0;
}

// A Sample record's thread state letter (0: unknown), its blocking system call (-1: none or not
// known) and its tick.
inline constexpr char sample_state(const EventRecord& r) {
  return api_class_of(r) == ApiClass::Sample && r.object < 128 ? char(r.object) : 0;
}
inline constexpr int64_t sample_syscall(const EventRecord& r) {
  return api_class_of(r) == ApiClass::Sample && r.detail != 0 && r.detail <= 4096 ? int64_t(r.detail) - 1 : -1;
}
inline constexpr uint32_t sample_tick(const EventRecord& r) {
  return api_class_of(r) == ApiClass::Sample ? r.sequence : 0;
}
// A ProcessSample record's counts.
struct ProcessCensus {
  uint64_t threads = 0;
  uint64_t workers_alive = 0;
  uint64_t workers_cpu_ns = 0;
  uint64_t workers_seen = 0;
  uint64_t other_children = 0;
};
inline constexpr ProcessCensus process_census(const EventRecord& r) {
  if (api_class_of(r) != ApiClass::ProcessSample) return {};
  return {r.bytes, r.object, r.detail, r.sequence, r.rank_in_comm};
}

// What the shim's sampler did in a process (SegmentHeader::sampler).
enum class SamplerState : uint32_t {
  NotStarted = 0,  // recording has not started, or the header of an older shim
  On = 1,          // sampling at SegmentHeader::sample_hz
  Off = 2,         // turned off by the user (TRAINSHIM_SAMPLE_HZ=0)
  Failed = 3,      // its thread could not be started; nothing is sampled
};
inline constexpr uint32_t kSamplerStateCount = 4;
// In the database's `processes.sampler`; "" for NotStarted.
inline constexpr std::string_view sampler_state_name(SamplerState s) {
  constexpr std::string_view names[kSamplerStateCount] = {"", "on", "off", "failed"};
  return static_cast<uint32_t>(s) < kSamplerStateCount ? names[static_cast<uint32_t>(s)] : "";
}

// What the shim's GPU timeline (CUPTI's activity records) did in a process
// (SegmentHeader::gpu_timeline).
enum class GpuTimeline : uint32_t {
  NotStarted = 0,   // no CUDA call recorded yet, or the header of an older shim
  On = 1,           // CUPTI delivers records (in the windows of the duty cycle)
  Off = 2,          // turned off by the user (TRAINSHIM_GPU_TIMELINE=0)
  Unavailable = 3,  // no libcupti.so could be loaded, or it lacks what trainshim needs
  Taken = 4,        // another CUPTI client (a profiler, Nsight) held CUPTI first
  Yielded = 5,      // another CUPTI client started while trainshim held it: trainshim stepped aside
  Failed = 6,       // CUPTI returned an error; the timeline stopped
};
inline constexpr uint32_t kGpuTimelineCount = 7;
// In the database's `processes.gpu_timeline`; "" for NotStarted.
inline constexpr std::string_view gpu_timeline_name(GpuTimeline t) {
  constexpr std::string_view names[kGpuTimelineCount] = {"", "on", "off", "unavailable", "taken", "yielded", "failed"};
  return static_cast<uint32_t>(t) < kGpuTimelineCount ? names[static_cast<uint32_t>(t)] : "";
}

// What the shim knows of how a collective was (or was not) timed on the GPU.
enum CollectiveFlag : uint32_t {
  kUntimedCapturing = 1u << 0,  // its stream was being captured into a CUDA graph: replays are not measured
  kUntimedNoEvent = 1u << 1,    // no timing event could be had
  kInGroup = 1u << 2,           // inside an NCCL group: timed from the first call to the outermost group end
  kPointToPoint = 1u << 3,      // ncclSend / ncclRecv: numbered per peer, not among the collectives
  kSend = 1u << 4,              // with PointToPoint: a send (else a receive)
  kGroupInProgress = 1u << 5,   // the launch went to NCCL's thread (ncclInProgress: a group end, or a call
                                //   on a non-blocking communicator outside a group): timed only when the
                                //   program then waited for it with ncclCommGetAsyncError, as PyTorch does
  kGroupSimulated = 1u << 6,    // group end: ncclGroupSimulateEnd, nothing launched
  kExchange = 1u << 7,          // with PointToPoint, on a timing record: the group's point-to-point calls
                                //   exchanged with every rank of the communicator (all_to_all, a 2-rank
                                //   batch_isend_irecv); sequence = the exchange's number on the
                                //   communicator, matched across ranks as a collective's
};
inline constexpr uint32_t kKnownCollectiveFlags = (1u << 8) - 1;
inline constexpr uint32_t kUntimedFlags = kUntimedCapturing | kUntimedNoEvent | kGroupInProgress;

// A ring slot. `state` is 2*lap+1 once the slot holds that lap's record (ring.hpp), so that
// zero-filled memory is an empty ring.
struct Slot {
  std::atomic<uint64_t> state;
  EventRecord record;
};
static_assert(sizeof(Slot) == 96);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

enum class SideKind : uint16_t {
  NativeStack = 1,  // count return addresses, innermost first, in `native`
  PythonStack = 2,  // count frames, innermost first, in `python`; value: kPythonStackBorrowed |
                    // frames omitted between the kept innermost and outermost ones << 32
  Module = 3,       // value = load base; text = build id (count bytes) then, at kModulePathOffset, the path
  String = 4,       // count bytes of text (file and function names of Python frames)
  Facts = 5,        // count bytes of text: "key=value\n" lines of what the sampler found of the process's
                    // setup (kFactKeys); a later line of the same key replaces an earlier one
};

// The keys of Facts records. Lists of CPUs are in the kernel's cpulist form ("0-15,32-47").
//   affinity         the CPUs the process may run on (sched_getaffinity)
//   cpus_online      the node's online CPUs (<sysfs>/devices/system/cpu/online)
//   device           the CUDA device the process uses (its last cudaSetDevice; 0 without one)
//   gpus             CUDA devices the process sees (cudaGetDeviceCount)
//   gpu_pci_bus_id   the device's PCI address (cudaDeviceGetPCIBusId), e.g. "0000:3b:00.0"
//   gpu_numa_node    the device's NUMA node (<sysfs>/bus/pci/devices/<bus id>/numa_node; -1: none)
//   gpu_numa_cpus    that node's CPUs (<sysfs>/devices/system/node/node<N>/cpulist)
//   env.<NAME>       the environment at recording start: OMP_NUM_THREADS, MKL_NUM_THREADS,
//                    CUDA_VISIBLE_DEVICES, LOCAL_WORLD_SIZE and every NCCL_* variable
//   thread.<TID>     the name of thread TID (/proc/self/task/<TID>/comm, control characters as '?'),
//                    published by the census when a thread appears or renames itself
// <sysfs> is /sys, or TRAINSHIM_SYSFS (tests point it at a prepared tree).
inline constexpr std::string_view kFactKeys[] = {"affinity",       "cpus_online",   "device",       "gpus",
                                                 "gpu_pci_bus_id", "gpu_numa_node", "gpu_numa_cpus"};
inline constexpr std::string_view kFactEnvironmentPrefix = "env.";
inline constexpr std::string_view kFactThreadPrefix = "thread.";

inline constexpr uint32_t kMaxNativeFrames = 64;
inline constexpr uint32_t kMaxPythonFrames = 62;
inline constexpr uint32_t kSideTextBytes = 1008;
inline constexpr uint32_t kMaxBuildIdBytes = 64;
inline constexpr uint32_t kModulePathOffset = kMaxBuildIdBytes;
// A Python stack borrowed by an autograd engine thread (no frames of its own) from the thread
// blocked in backward.
inline constexpr uint64_t kPythonStackBorrowed = 1;

// What the shim can read of a process's Python stacks (SegmentHeader::python_stacks, as
// kind | minor << 8, minor being the 3.X of the interpreter).
enum class PythonStacks : uint8_t {
  Unknown = 0,
  Available = 1,
  NoPython = 2,
  FreeThreaded = 3,
  UnsupportedVersion = 4
};

inline constexpr uint32_t python_stacks_word(PythonStacks kind, int minor) {
  return static_cast<uint32_t>(kind) | static_cast<uint32_t>(minor < 0 || minor > 255 ? 0 : minor) << 8;
}
inline constexpr PythonStacks python_stacks_kind(uint32_t word) {
  const uint32_t kind = word & 0xff;
  return kind <= static_cast<uint32_t>(PythonStacks::UnsupportedVersion) ? static_cast<PythonStacks>(kind)
                                                                         : PythonStacks::Unknown;
}
inline constexpr int python_stacks_minor(uint32_t word) { return static_cast<int>(word >> 8 & 0xff); }

struct PythonFrameRecord {
  uint32_t file;      // String id
  uint32_t function;  // String id
  int32_t line;
  uint32_t reserved;
};

struct SideRecord {
  uint16_t kind;   // SideKind
  uint16_t count;  // frames, or bytes of text
  uint32_t id;     // per process and kind; 0 is never used
  uint64_t value;
  union {
    uint64_t native[kMaxNativeFrames];
    PythonFrameRecord python[kMaxPythonFrames];
    char text[kSideTextBytes];
  };
};
static_assert(sizeof(SideRecord) == 1024);

struct SideSlot {
  std::atomic<uint64_t> state;
  SideRecord record;
};

struct alignas(64) RingControl {
  std::atomic<uint64_t> head;  // next position a producer claims; the records before it are claimed
  char pad0[56];
  std::atomic<uint64_t> tail;  // next position the collector gives back: the slots before it are free
  char pad1[56];
  std::atomic<uint64_t> dropped;  // records lost because the ring was full
  std::atomic<uint32_t> owner;    // the shim's own: kernel id of the thread writing the ring alone, 0 = none
  uint32_t reserved;
  char pad2[48];
};
static_assert(sizeof(RingControl) == 192);

enum class ProducerState : uint32_t { Live = 1, Exited = 2 };

struct alignas(64) SegmentHeader {
  uint64_t magic;
  uint32_t format_version;
  uint32_t header_bytes;   // sizeof(SegmentHeader)
  uint64_t segment_bytes;  // whole mapping
  uint32_t ring_count;
  uint32_t first_ring_capacity;  // slots of ring 0, a power of two
  uint32_t ring_capacity;        // slots of each other ring, a power of two
  uint32_t slot_bytes;           // sizeof(Slot)
  uint32_t side_capacity;        // slots of the side ring, a power of two
  uint32_t side_slot_bytes;      // sizeof(SideSlot)
  int32_t pid;
  int32_t rank;  // -1: not launched by a known launcher
  int32_t local_rank;
  int32_t world_size;
  uint32_t clock_kind;    // ClockKind
  uint32_t reserved;      // 0; keeps the 64-bit fields below 8-byte aligned
  uint64_t anchor_ticks;  // clock reading taken together with the two below
  uint64_t anchor_monotonic_ns;
  uint64_t anchor_realtime_ns;
  char host[64];
  char job[128];
  char command[256];                          // argv[0] and arguments, space-separated, truncated
  std::atomic<uint64_t> dropped_not_ready;    // events lost while the segment was being created
  std::atomic<uint64_t> untimed_capturing;    // collectives not timed: their stream was being captured
  std::atomic<uint64_t> untimed_no_event;     // collectives not timed: no timing event free
  std::atomic<uint32_t> producer_state;       // ProducerState; published last with release
  std::atomic<uint32_t> python_stacks;        // python_stacks_word(); 0 until the first stack capture
  std::atomic<uint32_t> gpu_timeline;         // GpuTimeline
  std::atomic<uint64_t> gpu_records_dropped;  // activity records CUPTI dropped (its buffers were full)
  std::atomic<uint32_t> sampler;              // SamplerState
  std::atomic<uint32_t> sample_hz;            // the sampler's rate (ticks per second) while On
  std::atomic<uint64_t> samples_torn;         // threads' samples dropped: their frames changed or vanished while read
};

inline constexpr uint64_t ring_bytes(uint32_t capacity) {
  return sizeof(RingControl) + uint64_t{capacity} * sizeof(Slot);
}
inline constexpr uint64_t side_ring_bytes(uint32_t capacity) {
  return sizeof(RingControl) + uint64_t{capacity} * sizeof(SideSlot);
}
// The event rings together: the first, then the others; `ring_count` >= 1.
inline constexpr uint64_t event_rings_bytes(uint32_t ring_count, uint32_t first_ring_capacity, uint32_t ring_capacity) {
  return ring_bytes(first_ring_capacity) + uint64_t{ring_count - 1} * ring_bytes(ring_capacity);
}
inline constexpr uint64_t segment_bytes(uint32_t ring_count, uint32_t first_ring_capacity, uint32_t ring_capacity,
                                        uint32_t side_capacity) {
  return sizeof(SegmentHeader) + event_rings_bytes(ring_count, first_ring_capacity, ring_capacity) +
         side_ring_bytes(side_capacity);
}
static_assert(sizeof(SegmentHeader) % 64 == 0, "rings must start cache-line aligned");
static_assert(offsetof(SegmentHeader, anchor_ticks) % 8 == 0 && offsetof(SegmentHeader, dropped_not_ready) % 8 == 0,
              "the header's 64-bit fields are naturally aligned");

// What a segment is and how it is laid out, as a producer writes it into a new header; the rest
// (who produced it, its clock anchors, its state) is the producer's own.
inline void write_layout(SegmentHeader& header, uint32_t ring_count, uint32_t first_ring_capacity,
                         uint32_t ring_capacity, uint32_t side_capacity) {
  header.magic = kSegmentMagic;
  header.format_version = kFormatVersion;
  header.header_bytes = sizeof(SegmentHeader);
  header.segment_bytes = segment_bytes(ring_count, first_ring_capacity, ring_capacity, side_capacity);
  header.ring_count = ring_count;
  header.first_ring_capacity = first_ring_capacity;
  header.ring_capacity = ring_capacity;
  header.slot_bytes = sizeof(Slot);
  header.side_capacity = side_capacity;
  header.side_slot_bytes = sizeof(SideSlot);
}

// Who produced a segment, and its clock anchors (read together, in this order).
struct SegmentProducer {
  int32_t pid = 0;
  int32_t rank = -1;  // -1: not launched by a known launcher
  int32_t local_rank = -1;
  int32_t world_size = -1;
  ClockKind clock_kind = ClockKind::Monotonic;
  uint64_t anchor_monotonic_ns = 0;
  uint64_t anchor_ticks = 0;
  uint64_t anchor_realtime_ns = 0;
  // Cut to fit their fields.
  std::string_view host = {};
  std::string_view job = {};
  std::string_view command = {};
};

// A new segment's header, all but its counters and its producer_state, which the producer
// publishes last.
inline void init_segment_header(SegmentHeader& header, uint32_t ring_count, uint32_t first_ring_capacity,
                                uint32_t ring_capacity, uint32_t side_capacity, const SegmentProducer& producer) {
  write_layout(header, ring_count, first_ring_capacity, ring_capacity, side_capacity);
  header.pid = producer.pid;
  header.rank = producer.rank;
  header.local_rank = producer.local_rank;
  header.world_size = producer.world_size;
  header.clock_kind = static_cast<uint32_t>(producer.clock_kind);
  header.anchor_ticks = producer.anchor_ticks;
  header.anchor_monotonic_ns = producer.anchor_monotonic_ns;
  header.anchor_realtime_ns = producer.anchor_realtime_ns;
  const auto copy_text = [](char* field, std::size_t capacity, std::string_view text) {
    // string_view::copy, not memcpy: an empty view's data() may be null.
    field[text.copy(field, capacity - 1)] = '\0';
  };
  copy_text(header.host, sizeof header.host, producer.host);
  copy_text(header.job, sizeof header.job, producer.job);
  copy_text(header.command, sizeof header.command, producer.command);
}

inline constexpr uint32_t kMaxRings = 256;
// Ranks in one NCCL communicator: far above the largest jobs run (about 100k GPUs), low enough
// that nothing sized by it can exhaust memory.
inline constexpr uint32_t kMaxCommSize = 1u << 20;
inline constexpr uint32_t kMaxRingCapacity = 1u << 22;
inline constexpr uint32_t kMaxSideCapacity = 1u << 16;

// Why a segment cannot be read; Ok when it can.
enum class HeaderProblem { Ok, TooSmall, BadMagic, BadVersion, BadGeometry, NotPublished };

inline constexpr std::string_view header_problem_text(HeaderProblem p) {
  switch (p) {
    case HeaderProblem::Ok:
      return "ok";
    case HeaderProblem::TooSmall:
      return "segment smaller than its header";
    case HeaderProblem::BadMagic:
      return "not a trainshim segment (bad magic)";
    case HeaderProblem::BadVersion:
      return "segment format version not supported by this collector";
    case HeaderProblem::BadGeometry:
      return "ring geometry inconsistent with the segment size";
    case HeaderProblem::NotPublished:
      return "segment not yet published by its producer";
  }
  return "unknown";
}

// mapped_bytes: the size of the mapping the reader actually has.
inline HeaderProblem validate_header(const SegmentHeader& h, uint64_t mapped_bytes) {
  if (mapped_bytes < sizeof(SegmentHeader)) return HeaderProblem::TooSmall;
  // The producer publishes its state last: until then every other field may be half-written.
  const auto state = h.producer_state.load(std::memory_order_acquire);
  if (state == 0) return HeaderProblem::NotPublished;
  if (h.magic != kSegmentMagic) return HeaderProblem::BadMagic;
  if (h.format_version != kFormatVersion) return HeaderProblem::BadVersion;
  auto power_of_two = [](uint32_t n) { return n != 0 && (n & (n - 1)) == 0; };
  if (h.header_bytes != sizeof(SegmentHeader) || h.slot_bytes != sizeof(Slot) ||
      h.side_slot_bytes != sizeof(SideSlot) || !power_of_two(h.first_ring_capacity) || !power_of_two(h.ring_capacity) ||
      !power_of_two(h.side_capacity) || h.first_ring_capacity > kMaxRingCapacity ||
      h.ring_capacity > kMaxRingCapacity || h.side_capacity > kMaxSideCapacity || h.ring_count == 0 ||
      h.ring_count > kMaxRings ||
      h.segment_bytes != segment_bytes(h.ring_count, h.first_ring_capacity, h.ring_capacity, h.side_capacity) ||
      h.segment_bytes > mapped_bytes ||
      (h.clock_kind != static_cast<uint32_t>(ClockKind::Tsc) &&
       h.clock_kind != static_cast<uint32_t>(ClockKind::Monotonic)))
    return HeaderProblem::BadGeometry;
  if (state != static_cast<uint32_t>(ProducerState::Live) && state != static_cast<uint32_t>(ProducerState::Exited))
    return HeaderProblem::BadGeometry;
  return HeaderProblem::Ok;
}

inline bool validate_side_record(const SideRecord& r) {
  if (r.id == 0) return false;
  switch (static_cast<SideKind>(r.kind)) {
    case SideKind::NativeStack:
      return r.count > 0 && r.count <= kMaxNativeFrames;
    case SideKind::PythonStack:
      return r.count > 0 && r.count <= kMaxPythonFrames;
    case SideKind::Module:
      return r.count <= kMaxBuildIdBytes;
    case SideKind::String:
    case SideKind::Facts:
      return r.count <= kSideTextBytes;
  }
  return false;
}

inline bool validate_record(const EventRecord& r) {
  if (r.api >= kApiCount || r.direction >= kDirectionCount || r.host_memory >= kHostMemoryCount) return false;
  if (r.end_ticks < r.begin_ticks) return false;
  const auto cls = kApis[r.api].api_class;
  if ((r.flags & ~kKnownCollectiveFlags) != 0) return false;
  const bool carries_flags =
      cls == ApiClass::Collective || cls == ApiClass::CollectiveTiming || cls == ApiClass::GroupEnd;
  if (!carries_flags && r.flags != 0) return false;
  // A peer only for point-to-point calls, and then a rank of the communicator.
  if (r.flags & kPointToPoint) {
    if (r.comm_size != 0 && r.peer >= r.comm_size) return false;
  } else if (r.peer != 0) {
    return false;
  }
  // A split can leave this rank in no child (object 0, size 0); a communicator has a rank in it,
  // also one handed out by a non-blocking init (ncclInProgress, 7).
  if (cls == ApiClass::CommInit && (r.result == 0 || r.result == 7) && r.object != 0 &&
      (r.comm_size == 0 || r.comm_size > kMaxCommSize || r.rank_in_comm >= r.comm_size))
    return false;
  // A collective names its communicator's size and this rank in it; size 0 (a communicator the
  // shim could not ask) comes with rank 0.
  if ((cls == ApiClass::Collective || cls == ApiClass::CollectiveTiming) &&
      (r.comm_size > kMaxCommSize || (r.comm_size == 0 ? r.rank_in_comm != 0 : r.rank_in_comm >= r.comm_size)))
    return false;
  return true;
}

}  // namespace trainshim
