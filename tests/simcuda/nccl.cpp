// Simulated NCCL. A communicator is a POSIX shared-memory segment named from the unique id;
// collectives run on the stream's worker (like a kernel) as a real rendezvous of all ranks, so
// a rank that arrives early keeps its stream busy until the last rank arrives.
//
// Every API is defined as pnccl* and exported as a weak nccl* alias, like the real library.
#include <nccl.h>

#include "simcuda.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr std::uint32_t kReady = 0x51ACC1u;
constexpr std::size_t kSlotBytes = std::size_t{8} << 20;       // collective chunk per rank
constexpr std::size_t kMailboxBytes = std::size_t{256} << 10;  // send/recv chunk per rank pair
constexpr std::size_t kAlign = 64;

// Layout of the segment: Header, then nranks collective slots, then nranks*nranks mailboxes.
// Plain integers accessed through std::atomic_ref: the segment starts zero-filled (ftruncate).
struct Header {
  std::uint32_t ready;
  std::uint32_t nranks;
  std::uint32_t arrived;     // barrier arrivals in the current generation
  std::uint32_t generation;  // bumped by the last arrival
  std::uint32_t aborted;     // a rank called ncclCommAbort
  std::uint32_t pad[11];
};
static_assert(sizeof(Header) % kAlign == 0);

struct Mailbox {
  std::uint32_t full;  // 1 while data waits for the receiver
  std::uint32_t pad;
  std::uint64_t len;
  std::uint8_t pad2[kAlign - 16];
};
static_assert(sizeof(Mailbox) == kAlign);

template <class T>
std::atomic_ref<T> at(T& v) {
  return std::atomic_ref<T>(v);
}

std::size_t segment_bytes(int n) {
  auto un = static_cast<std::size_t>(n);
  return sizeof(Header) + un * kSlotBytes + un * un * (sizeof(Mailbox) + kMailboxBytes);
}

struct Id {
  char magic[8];
  std::uint64_t hash;
  char desc[NCCL_UNIQUE_ID_BYTES - 16];
};
static_assert(sizeof(Id) == NCCL_UNIQUE_ID_BYTES);

std::uint64_t fnv1a(const void* data, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<const unsigned char*>(data)[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

struct ncclComm {
  int rank = 0;
  int nranks = 1;
  int device = 0;
  Header* hdr = nullptr;
  std::size_t map_bytes = 0;
  std::atomic<int> pending{0};       // operations enqueued but not finished
  std::atomic<bool> aborted{false};  // local abort
  std::atomic<int> async_error{ncclSuccess};
  std::uint64_t id_hash = 0;        // of the unique id it was made from: names its splits
  std::atomic<unsigned> splits{0};  // splits made of it so far (the same count on every rank)
  std::atomic<unsigned> shrinks{0};
  bool blocking = true;  // ncclConfig_t.blocking (1 unless a config says 0)
  // ncclInProgress while a non-blocking init, split or group launch of this communicator runs on
  // a thread of its own (init.cc commAlloc: initState; group.cc ncclGroupEndInternal).
  std::atomic<int> initState{ncclSuccess};

  std::uint8_t* slot(int r) const {
    return reinterpret_cast<std::uint8_t*>(hdr) + sizeof(Header) + static_cast<std::size_t>(r) * kSlotBytes;
  }
  Mailbox* mailbox(int src, int dst) const {
    std::size_t idx = static_cast<std::size_t>(src) * static_cast<std::size_t>(nranks) + static_cast<std::size_t>(dst);
    return reinterpret_cast<Mailbox*>(reinterpret_cast<std::uint8_t*>(hdr) + sizeof(Header) +
                                      static_cast<std::size_t>(nranks) * kSlotBytes +
                                      idx * (sizeof(Mailbox) + kMailboxBytes));
  }
  std::uint8_t* mailbox_data(int src, int dst) const { return reinterpret_cast<std::uint8_t*>(mailbox(src, dst) + 1); }
  bool aborted_any() const { return aborted.load() || (hdr && at(hdr->aborted).load(std::memory_order_acquire) != 0); }
  bool ready() const { return initState.load(std::memory_order_acquire) == ncclSuccess && hdr; }
};

namespace {

double timeout_seconds() {
  static const double t = [] {
    const char* env = std::getenv("SIMNCCL_TIMEOUT_S");
    double v = env ? std::atof(env) : 300.0;
    return v > 0 ? v : 300.0;
  }();
  return t;
}

// Waits with a short spin, then yields, then short sleeps: ranks are processes on few cores.
class Backoff {
 public:
  explicit Backoff(const ncclComm* c) : comm_(c), start_(std::chrono::steady_clock::now()) {}
  // Returns false if the wait must stop because the communicator was aborted.
  bool pause() {
    if (spin()) return !aborted();
    std::this_thread::sleep_for(std::chrono::microseconds(n_ < 2048 ? 20 : 200));
    if ((n_ & 255) == 0) check_timeout();
    return !aborted();
  }
  // The same for a wait until word (in the shared segment) is no longer value: past the spin, the
  // waiter sleeps on the word until the rank that changes it wakes it (wake_all). A rank waiting
  // for a straggler's collective otherwise woke every ~60 µs for as long as it waited, taking the
  // cores the straggler runs on.
  bool wait_change(std::uint32_t& word, std::uint32_t value) {
    if (spin()) return !aborted();
    timespec tick{0, 1'000'000};  // to look at aborts and the timeout again
    syscall(SYS_futex, &word, FUTEX_WAIT, value, &tick, nullptr, 0);
    check_timeout();
    return !aborted();
  }
  static void wake_all(std::uint32_t& word) { syscall(SYS_futex, &word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

 private:
  // The first waits: a spin, then yields. False once they are over.
  bool spin() {
    ++n_;
    if (n_ < 64) return true;
    if (n_ < 256) {
      std::this_thread::yield();
      return true;
    }
    return false;
  }
  void check_timeout() const {
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (waited > timeout_seconds()) {
      // A peer died or never arrived; hanging forever would hide that in tests.
      std::fprintf(stderr, "simnccl: rank %d timed out after %.0f s waiting for peers\n", comm_->rank, waited);
      std::_Exit(124);
    }
  }
  bool aborted() const { return comm_->aborted_any(); }
  const ncclComm* comm_;
  std::chrono::steady_clock::time_point start_;
  unsigned n_ = 0;
};

// Generation barrier over all ranks of the communicator.
bool barrier(ncclComm* c) {
  Header* h = c->hdr;
  auto gen = at(h->generation);
  std::uint32_t g = gen.load(std::memory_order_acquire);
  if (at(h->arrived).fetch_add(1, std::memory_order_acq_rel) == static_cast<std::uint32_t>(c->nranks - 1)) {
    at(h->arrived).store(0, std::memory_order_relaxed);
    gen.fetch_add(1, std::memory_order_release);
    Backoff::wake_all(h->generation);
    return true;
  }
  Backoff b(c);
  while (gen.load(std::memory_order_acquire) == g)
    if (!b.wait_change(h->generation, g)) return false;
  return true;
}

// ---- datatypes and reductions ----

std::size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

bool reducible(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclInt32:
    case ncclUint32:
    case ncclInt64:
    case ncclUint64:
    case ncclFloat16:
    case ncclBfloat16:
    case ncclFloat32:
    case ncclFloat64:
      return true;
    default:
      return false;  // fp8 reductions are not simulated
  }
}

// bf16 is the upper half of a float; round to nearest even on the way back.
float bf16_to_float(std::uint16_t v) {
  std::uint32_t bits = std::uint32_t{v} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
std::uint16_t float_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>(bits >> 16);
}

// IEEE binary16, converted by hand as __half2float and __float2half_rn do (round to nearest
// even): Clang 14 has no _Float16 on x86.
float half_to_float(std::uint16_t h) {
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) magnitude = std::ldexp(float(mantissa), -24);  // zero or subnormal
  else if (exponent == 0x1f) magnitude = mantissa ? NAN : INFINITY;
  else magnitude = std::ldexp(float(mantissa | 0x400u), int(exponent) - 25);
  return (h & 0x8000u) ? -magnitude : magnitude;
}
std::uint16_t float_to_half(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and above round to infinity
  if (magnitude < 0x38800000u)                          // below 2^-14: a subnormal half, in units of 2^-24
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(std::fabs(f) * 0x1p24f)));
  std::uint32_t half = (magnitude >> 13) - ((127u - 15u) << 10);  // rebias the exponent, keep 10 mantissa bits
  const std::uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry moves into the exponent
  return static_cast<std::uint16_t>(sign | half);
}

// Calls body with the operation as a function object, so that the loops it runs are compiled
// for that operation (a switch per element kept them from vectorising: the host's reductions were
// most of a simulated all-reduce's time).
template <class Body>
void with_combine(ncclRedOp_t op, Body&& body) {
  switch (op) {
    case ncclProd:
      return body([](auto a, auto b) { return static_cast<decltype(a)>(a * b); });
    case ncclMax:
      return body([](auto a, auto b) { return a > b ? a : b; });
    case ncclMin:
      return body([](auto a, auto b) { return a < b ? a : b; });
    default:
      return body([](auto a, auto b) { return static_cast<decltype(a)>(a + b); });  // ncclSum, ncclAvg
  }
}

// dst[i] = op over ranks r of src[r][i]; ranks are combined in rank order on every rank, so
// all ranks get bitwise identical results. Block by block, rank by rank: loops that vectorise.
template <class Acc, class Load, class Store>
void reduce_with(void* dst, const std::vector<const void*>& srcs, std::size_t count, ncclRedOp_t op, Load load,
                 Store store) {
  constexpr std::size_t kBlock = 2048;
  Acc acc[kBlock];
  with_combine(op, [&](auto combine) {
    for (std::size_t base = 0; base < count; base += kBlock) {
      const std::size_t n = std::min(kBlock, count - base);
      for (std::size_t j = 0; j < n; ++j) acc[j] = load(srcs[0], base + j);
      for (std::size_t r = 1; r < srcs.size(); ++r)
        for (std::size_t j = 0; j < n; ++j) acc[j] = combine(acc[j], load(srcs[r], base + j));
      if (op == ncclAvg)
        for (std::size_t j = 0; j < n; ++j) acc[j] = static_cast<Acc>(acc[j] / static_cast<Acc>(srcs.size()));
      for (std::size_t j = 0; j < n; ++j) store(dst, base + j, acc[j]);
    }
  });
}

template <class T>
void reduce_plain(void* dst, const std::vector<const void*>& srcs, std::size_t count, ncclRedOp_t op) {
  reduce_with<T>(
      dst, srcs, count, op, [](const void* p, std::size_t i) { return static_cast<const T*>(p)[i]; },
      [](void* p, std::size_t i, T v) { static_cast<T*>(p)[i] = v; });
}

void reduce(void* dst, const std::vector<const void*>& srcs, std::size_t count, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
    case ncclInt8:
      return reduce_plain<std::int8_t>(dst, srcs, count, op);
    case ncclUint8:
      return reduce_plain<std::uint8_t>(dst, srcs, count, op);
    case ncclInt32:
      return reduce_plain<std::int32_t>(dst, srcs, count, op);
    case ncclUint32:
      return reduce_plain<std::uint32_t>(dst, srcs, count, op);
    case ncclInt64:
      return reduce_plain<std::int64_t>(dst, srcs, count, op);
    case ncclUint64:
      return reduce_plain<std::uint64_t>(dst, srcs, count, op);
    case ncclFloat32:
      return reduce_plain<float>(dst, srcs, count, op);
    case ncclFloat64:
      return reduce_plain<double>(dst, srcs, count, op);
    case ncclFloat16:
      return reduce_with<float>(
          dst, srcs, count, op,
          [](const void* p, std::size_t i) { return half_to_float(static_cast<const std::uint16_t*>(p)[i]); },
          [](void* p, std::size_t i, float v) { static_cast<std::uint16_t*>(p)[i] = float_to_half(v); });
    case ncclBfloat16:
      return reduce_with<float>(
          dst, srcs, count, op,
          [](const void* p, std::size_t i) { return bf16_to_float(static_cast<const std::uint16_t*>(p)[i]); },
          [](void* p, std::size_t i, float v) { static_cast<std::uint16_t*>(p)[i] = float_to_bf16(v); });
    default:
      return;
  }
}

// ---- tasks executed on the stream's worker ----

enum class Kind { AllReduce, Reduce, Broadcast, AllGather, ReduceScatter, P2P, Batch };

struct P2POp {
  bool send;
  int peer;
  std::uint8_t* buf;
  std::size_t bytes;
  std::size_t done = 0;
  std::uint8_t* copy_to = nullptr;  // set: the block this rank keeps (peer = own rank), copied locally
};

struct Task {
  Kind kind;
  ncclComm* comm;
  const void* send;
  void* recv;
  std::size_t count;  // elements per rank (see each collective)
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  std::vector<P2POp> p2p;
  std::vector<Task> batch;  // Kind::Batch: one group's work on one (communicator, stream), in order
};

std::vector<const void*> slot_ptrs(ncclComm* c, std::size_t byte_offset = 0) {
  std::vector<const void*> v;
  for (int r = 0; r < c->nranks; ++r) v.push_back(c->slot(r) + byte_offset);
  return v;
}

// Reduces count elements of every rank's src into dst on the ranks for which want_result.
bool reduce_chunks(ncclComm* c, const void* src, void* dst, std::size_t count, ncclDataType_t t, ncclRedOp_t op,
                   bool want_result) {
  std::size_t es = type_size(t);
  std::size_t per = kSlotBytes / es;
  for (std::size_t off = 0; off < count || off == 0; off += per) {
    std::size_t n = std::min(per, count - off);
    std::memcpy(c->slot(c->rank), static_cast<const std::uint8_t*>(src) + off * es, n * es);
    if (!barrier(c)) return false;
    if (want_result) reduce(static_cast<std::uint8_t*>(dst) + off * es, slot_ptrs(c), n, t, op);
    if (!barrier(c)) return false;  // nobody refills a slot before all have read it
    if (count == 0) break;
  }
  return true;
}

bool run_broadcast(ncclComm* c, const void* src, void* dst, std::size_t bytes, int root) {
  for (std::size_t off = 0; off < bytes; off += kSlotBytes) {
    std::size_t n = std::min(kSlotBytes, bytes - off);
    if (c->rank == root) std::memcpy(c->slot(root), static_cast<const std::uint8_t*>(src) + off, n);
    if (!barrier(c)) return false;
    if (c->rank != root || dst != src) std::memcpy(static_cast<std::uint8_t*>(dst) + off, c->slot(root), n);
    if (!barrier(c)) return false;
  }
  return true;
}

bool run_all_gather(ncclComm* c, const void* src, void* dst, std::size_t bytes) {
  for (std::size_t off = 0; off < bytes; off += kSlotBytes) {
    std::size_t n = std::min(kSlotBytes, bytes - off);
    std::memcpy(c->slot(c->rank), static_cast<const std::uint8_t*>(src) + off, n);
    if (!barrier(c)) return false;
    for (int r = 0; r < c->nranks; ++r)
      std::memcpy(static_cast<std::uint8_t*>(dst) + static_cast<std::size_t>(r) * bytes + off, c->slot(r), n);
    if (!barrier(c)) return false;
  }
  return true;
}

// Progresses all sends and receives of one group together, so that pairs of ranks that send
// to each other cannot deadlock on the bounded mailboxes.
bool run_p2p(ncclComm* c, std::vector<P2POp>& ops) {
  Backoff b(c);
  for (;;) {
    bool all = true, progress = false;
    std::vector<char> send_busy(static_cast<std::size_t>(c->nranks)), recv_busy(static_cast<std::size_t>(c->nranks));
    for (auto& o : ops) {
      if (o.done == o.bytes) continue;
      if (o.copy_to) {
        std::memmove(o.copy_to, o.buf, o.bytes);  // in place is allowed
        o.done = o.bytes;
        progress = true;
        continue;
      }
      all = false;
      auto peer = static_cast<std::size_t>(o.peer);
      // Messages to one peer are delivered in issue order.
      if (o.send) {
        if (send_busy[peer]) continue;
        send_busy[peer] = 1;
        Mailbox* m = c->mailbox(c->rank, o.peer);
        if (at(m->full).load(std::memory_order_acquire)) continue;
        std::size_t n = std::min(kMailboxBytes, o.bytes - o.done);
        std::memcpy(c->mailbox_data(c->rank, o.peer), o.buf + o.done, n);
        m->len = n;
        at(m->full).store(1, std::memory_order_release);
        o.done += n;
      } else {
        if (recv_busy[peer]) continue;
        recv_busy[peer] = 1;
        Mailbox* m = c->mailbox(o.peer, c->rank);
        if (!at(m->full).load(std::memory_order_acquire)) continue;
        std::size_t n = std::min<std::size_t>(m->len, o.bytes - o.done);
        std::memcpy(o.buf + o.done, c->mailbox_data(o.peer, c->rank), n);
        at(m->full).store(0, std::memory_order_release);
        o.done += n;
      }
      progress = true;
    }
    if (all) return true;
    if (!progress && !b.pause()) return false;
  }
}

bool run_one(Task* t) {
  ncclComm* c = t->comm;
  std::size_t es = type_size(t->type);
  bool ok = true;
  switch (t->kind) {
    case Kind::AllReduce:
      ok = reduce_chunks(c, t->send, t->recv, t->count, t->type, t->op, true);
      break;
    case Kind::Reduce:
      ok = reduce_chunks(c, t->send, t->recv, t->count, t->type, t->op, c->rank == t->root);
      break;
    case Kind::Broadcast:
      ok = run_broadcast(c, t->send, t->recv, t->count * es, t->root);
      break;
    case Kind::AllGather:
      ok = run_all_gather(c, t->send, t->recv, t->count * es);
      break;
    case Kind::ReduceScatter:
      // Block r of every rank's sendbuff is reduced into rank r's recvbuff.
      for (int r = 0; r < c->nranks && ok; ++r)
        ok = reduce_chunks(c, static_cast<const std::uint8_t*>(t->send) + static_cast<std::size_t>(r) * t->count * es,
                           t->recv, t->count, t->type, t->op, c->rank == r);
      break;
    case Kind::P2P:
      ok = run_p2p(c, t->p2p);
      break;
    case Kind::Batch:
      for (Task& part : t->batch)
        if (ok) ok = run_one(&part);
      break;
  }
  return ok;
}

void run_task(void* arg) {
  Task* t = static_cast<Task*>(arg);
  ncclComm* c = t->comm;
  if (!run_one(t)) c->async_error.store(c->aborted.load() ? ncclInvalidUsage : ncclRemoteError);
  // It waited for its peers on the wall clock: the GPU's time is at least there.
  simcudaCaughtUp();
  c->pending.fetch_sub(1);
  delete t;
}

// The kernel the real NCCL (2.2x, as in libnccl.so.2's device code) launches for a task, by its
// mangled name: a kernel specialised for Sum in the RING_LL protocol where libnccl has one (signed
// integers share the unsigned ones), ncclDevKernel_SendRecv for point-to-point work,
// ncclDevKernel_Generic for the rest and for several collectives in one launch.
std::string kernel_name(const Task& t) {
  if (t.kind == Kind::Batch && t.batch.size() == 1) return kernel_name(t.batch.front());
  auto type = [](ncclDataType_t d) -> const char* {
    switch (d) {
      case ncclInt8:
      case ncclUint8:
        return "u8";
      case ncclInt32:
      case ncclUint32:
        return "u32";
      case ncclInt64:
      case ncclUint64:
        return "u64";
      case ncclFloat16:
        return "f16";
      case ncclBfloat16:
        return "bf16";
      case ncclFloat32:
        return "f32";
      case ncclFloat64:
        return "f64";
      case ncclFloat8e4m3:
        return "f8e4m3";
      case ncclFloat8e5m2:
        return "f8e5m2";
      default:
        return nullptr;
    }
  };
  std::string name = "ncclDevKernel_Generic";
  const char* ty = type(t.type);
  const bool sum = t.op == ncclSum && ty;
  switch (t.kind) {
    case Kind::AllReduce:
      if (sum) name = std::string("ncclDevKernel_AllReduce_Sum_") + ty + "_RING_LL";
      break;
    case Kind::Reduce:
      if (sum) name = std::string("ncclDevKernel_Reduce_Sum_") + ty + "_RING_LL";
      break;
    case Kind::ReduceScatter:
      if (sum) name = std::string("ncclDevKernel_ReduceScatter_Sum_") + ty + "_RING_LL";
      break;
    case Kind::Broadcast:
      name = "ncclDevKernel_Broadcast_RING_LL";
      break;
    case Kind::AllGather:
      name = "ncclDevKernel_AllGather_RING_LL";
      break;
    case Kind::P2P:
      name = "ncclDevKernel_SendRecv";
      break;
    case Kind::Batch:
      break;
  }
  return "_Z" + std::to_string(name.size()) + name + "24ncclDevKernelArgsStorageILm4096EE";
}

ncclResult_t submit(cudaStream_t stream, Task* t) {
  t->comm->pending.fetch_add(1);
  if (simcudaEnqueueKernel(stream, kernel_name(*t).c_str(), run_task, t) != cudaSuccess) {
    t->comm->pending.fetch_sub(1);
    delete t;
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

// ---- groups ----
// Mirrors group.cc: between ncclGroupStart and the outermost ncclGroupEnd every call only
// appends a task (enqueue.cc taskAppend); the outermost end launches them all, one launch per
// (communicator, stream). A group with a non-blocking communicator launches on a thread of its
// own and returns ncclInProgress (ncclGroupEndInternal: "nonblocking group").

struct Queued {
  ncclComm* comm;
  cudaStream_t stream;
  Task task;
};
thread_local int tls_group_depth = 0;
thread_local std::vector<Queued> tls_group_ops;

ncclResult_t submit(cudaStream_t stream, Task* t);

ncclResult_t flush_group();

// enqueue.cc ncclEnqueueCheck: every call is an implicit group of its own, so a call on a
// non-blocking communicator outside a group also launches on a thread and returns ncclInProgress.
ncclResult_t enqueue(ncclComm* comm, cudaStream_t stream, Task task) {
  tls_group_ops.push_back({comm, stream, std::move(task)});
  return tls_group_depth > 0 ? ncclSuccess : flush_group();
}

// One task per (communicator, stream), in the order of their first call: collectives in issue
// order, then the point-to-point calls progressed together (so that ranks sending to each
// other cannot deadlock on the bounded mailboxes).
std::vector<std::pair<cudaStream_t, Task*>> batches(std::vector<Queued>& ops) {
  std::vector<std::pair<cudaStream_t, Task*>> out;
  std::vector<Task*> p2p;
  for (auto& q : ops) {
    std::size_t i = 0;
    while (i < out.size() && !(out[i].first == q.stream && out[i].second->comm == q.comm)) ++i;
    if (i == out.size()) {
      out.push_back({q.stream, new Task{Kind::Batch, q.comm, nullptr, nullptr, 0, ncclUint8, ncclSum, 0, {}, {}}});
      p2p.push_back(new Task{Kind::P2P, q.comm, nullptr, nullptr, 0, ncclUint8, ncclSum, 0, {}, {}});
    }
    if (q.task.kind == Kind::P2P) {
      for (auto& o : q.task.p2p) p2p[i]->p2p.push_back(o);
    } else {
      out[i].second->batch.push_back(std::move(q.task));
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!p2p[i]->p2p.empty()) out[i].second->batch.push_back(std::move(*p2p[i]));
    delete p2p[i];
  }
  return out;
}

ncclResult_t launch(std::vector<std::pair<cudaStream_t, Task*>>& work) {
  ncclResult_t res = ncclSuccess;
  for (auto& [stream, t] : work) {
    ncclResult_t r = submit(stream, t);
    if (r != ncclSuccess) res = r;
  }
  return res;
}

ncclResult_t flush_group() {
  std::vector<Queued> ops = std::move(tls_group_ops);
  tls_group_ops.clear();
  auto work = batches(ops);
  std::vector<ncclComm*> non_blocking;
  for (auto& [stream, t] : work)
    if (!t->comm->blocking && std::find(non_blocking.begin(), non_blocking.end(), t->comm) == non_blocking.end())
      non_blocking.push_back(t->comm);
  if (non_blocking.empty()) return launch(work);
  for (ncclComm* c : non_blocking) c->initState.store(ncclInProgress, std::memory_order_release);
  std::thread([work = std::move(work), non_blocking]() mutable {
    // The launch is late on purpose: the caller's stream work after ncclGroupEnd runs first, as
    // with NCCL's asynchronous group thread.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const ncclResult_t r = launch(work);
    for (ncclComm* c : non_blocking) c->initState.store(r, std::memory_order_release);
  }).detach();
  return ncclInProgress;
}

ncclResult_t collective(Kind kind, const void* send, void* recv, std::size_t count, ncclDataType_t type, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (!comm || type_size(type) == 0) return ncclInvalidArgument;
  if (!comm->ready()) return ncclInvalidArgument;  // init.cc ncclCommEnsureReady
  if ((kind == Kind::AllReduce || kind == Kind::Reduce || kind == Kind::ReduceScatter) &&
      (!reducible(type) || op < ncclSum || op > ncclAvg))
    return ncclInvalidArgument;
  if ((kind == Kind::Reduce || kind == Kind::Broadcast) && (root < 0 || root >= comm->nranks))
    return ncclInvalidArgument;
  if (count > 0 && (!recv || !send) && !(kind == Kind::Reduce && comm->rank != root && send))
    return ncclInvalidArgument;
  return enqueue(comm, stream, Task{kind, comm, send, recv, count, type, op, root, {}, {}});
}

ncclResult_t p2p(bool send, const void* buf, std::size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                 cudaStream_t stream) {
  if (!comm || type_size(type) == 0 || peer < 0 || peer >= comm->nranks) return ncclInvalidArgument;
  if (!comm->ready()) return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  if (!buf) return ncclInvalidArgument;
  Task t{Kind::P2P, comm, nullptr, nullptr, 0, ncclUint8, ncclSum, 0, {}, {}};
  t.p2p.push_back(P2POp{send, peer, static_cast<std::uint8_t*>(const_cast<void*>(buf)), count * type_size(type)});
  return enqueue(comm, stream, std::move(t));
}

// AlltoAll, Gather and Scatter as one launch of sends and receives (the blocks a rank keeps for
// itself are copied when the launch runs): what they move, not how NCCL's kernels move it.
ncclResult_t exchange(ncclComm_t comm, cudaStream_t stream, const void* send, void* recv, std::size_t count,
                      ncclDataType_t type, int root, bool to_all, bool from_all) {
  if (!comm || type_size(type) == 0) return ncclInvalidArgument;
  if (!comm->ready()) return ncclInvalidArgument;
  if (!to_all || !from_all) {
    if (root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  }
  const std::size_t bytes = count * type_size(type);
  auto* out = static_cast<std::uint8_t*>(const_cast<void*>(send));
  auto* in = static_cast<std::uint8_t*>(recv);
  Task t{Kind::P2P, comm, nullptr, nullptr, 0, ncclUint8, ncclSum, 0, {}, {}};
  const int me = comm->rank;
  for (int r = 0; r < comm->nranks; ++r) {
    if (r == me) continue;
    const auto ur = static_cast<std::size_t>(r);
    // to_all: this rank sends block r to rank r (scatter: only the root; gather: everyone to the root).
    if (to_all && from_all) {
      t.p2p.push_back(P2POp{true, r, out + ur * bytes, bytes});
      t.p2p.push_back(P2POp{false, r, in + ur * bytes, bytes});
    } else if (to_all && me == root) {
      t.p2p.push_back(P2POp{true, r, out + ur * bytes, bytes});
    } else if (from_all && me == root) {
      t.p2p.push_back(P2POp{false, r, in + ur * bytes, bytes});
    } else if (to_all && r == root) {
      t.p2p.push_back(P2POp{false, r, in, bytes});
    } else if (from_all && r == root) {
      t.p2p.push_back(P2POp{true, r, out, bytes});
    }
  }
  const auto self = static_cast<std::size_t>(me);
  if (to_all && from_all) t.p2p.push_back(P2POp{true, me, out + self * bytes, bytes, 0, in + self * bytes});
  else if (to_all && me == root) t.p2p.push_back(P2POp{true, me, out + self * bytes, bytes, 0, in});
  else if (from_all && me == root) t.p2p.push_back(P2POp{true, me, out, bytes, 0, in + self * bytes});
  if (t.p2p.empty()) return ncclSuccess;
  return enqueue(comm, stream, std::move(t));
}

// ---- communicators ----

std::string segment_name(const ncclUniqueId& id) {
  char name[64];
  std::snprintf(name, sizeof(name), "/simnccl-%016llx",
                static_cast<unsigned long long>(fnv1a(id.internal, sizeof(id.internal))));
  return name;
}

// The communicator's shared memory: in /dev/shm, or with SIMNCCL_SHM_DIR in that directory, which
// ranks in different mount namespaces (simulated nodes, each with a /dev/shm of its own) share. It
// stands in for what real NCCL does between nodes, its network transport (src/transport/net.cc).
std::string shared_path(const std::string& name) {
  const char* dir = std::getenv("SIMNCCL_SHM_DIR");
  return dir && *dir ? std::string(dir) + name : std::string();
}

int open_shared(const std::string& name, int flags, mode_t mode) {
  const std::string path = shared_path(name);
  return path.empty() ? shm_open(name.c_str(), flags, mode) : open(path.c_str(), flags | O_CLOEXEC, mode);
}

void unlink_shared(const std::string& name) {
  const std::string path = shared_path(name);
  if (path.empty()) shm_unlink(name.c_str());
  else unlink(path.c_str());
}

// Creates the segment if this rank is first, or attaches to it; returns the mapping.
Header* open_segment(const std::string& name, int nranks, std::size_t bytes) {
  for (int attempt = 0;; ++attempt) {
    int fd = open_shared(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) {
      if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
        close(fd);
        unlink_shared(name);
        return nullptr;
      }
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (p == MAP_FAILED) {
        unlink_shared(name);
        return nullptr;
      }
      auto* h = static_cast<Header*>(p);
      h->nranks = static_cast<std::uint32_t>(nranks);
      at(h->ready).store(kReady, std::memory_order_release);  // publishes the header
      return h;
    }
    if (errno != EEXIST) return nullptr;
    fd = open_shared(name, O_RDWR, 0);
    if (fd < 0) {
      if (errno == ENOENT && attempt < 1000) continue;  // the creator failed and unlinked it
      return nullptr;
    }
    // The creator may not have sized it yet.
    struct stat st {};
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) < bytes &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (static_cast<std::size_t>(st.st_size) < bytes) {
      close(fd);
      return nullptr;
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return nullptr;
    auto* h = static_cast<Header*>(p);
    while (at(h->ready).load(std::memory_order_acquire) != kReady && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (at(h->ready).load(std::memory_order_acquire) != kReady || h->nranks != static_cast<std::uint32_t>(nranks)) {
      munmap(p, bytes);
      return nullptr;
    }
    return h;
  }
}

ncclComm* make_comm(Header* h, int nranks, int rank, std::size_t bytes) {
  auto* c = new ncclComm;
  c->rank = rank;
  c->nranks = nranks;
  c->hdr = h;
  c->map_bytes = bytes;
  cudaGetDevice(&c->device);
  return c;
}

void wait_idle(ncclComm* c) {
  while (c->pending.load() != 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

void free_comm(ncclComm* c) {
  wait_idle(c);
  if (c->hdr) munmap(c->hdr, c->map_bytes);
  delete c;
}

// ncclConfig_t.blocking, or `fallback` when the config leaves it undefined (init.cc
// parseCommConfig: blocking by default; a split without a config copies its parent's).
bool config_blocking(const ncclConfig_t* config, bool fallback) {
  if (!config || config->blocking == NCCL_CONFIG_UNDEF_INT) return fallback;
  return config->blocking != 0;
}

// Maps the segment of the id and waits for every rank (the bootstrap of init.cc
// ncclCommInitRankFunc). Init is collective: once every rank has mapped the segment its name is
// no longer needed, so it is unlinked right away and nothing is left in /dev/shm even if a rank
// crashes later.
ncclResult_t attach(ncclComm* c, const ncclUniqueId& commId) {
  const std::string name = segment_name(commId);
  const std::size_t bytes = segment_bytes(c->nranks);
  Header* h = open_segment(name, c->nranks, bytes);
  if (!h) return ncclSystemError;
  c->hdr = h;
  c->map_bytes = bytes;
  if (!barrier(c)) return ncclInvalidUsage;
  if (c->rank == 0) unlink_shared(name);
  Id id;
  std::memcpy(&id, commId.internal, sizeof(id));
  c->id_hash = id.hash;
  return ncclSuccess;
}

// init.cc ncclCommInitRankDev: a blocking communicator is ready on return; a non-blocking one is
// handed out at once with ncclInProgress and finishes on a thread (ncclAsyncLaunch), after which
// ncclCommGetAsyncError says ncclSuccess.
ncclResult_t init_comm(ncclComm_t* comm, int nranks, const ncclUniqueId& commId, int rank, bool blocking) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  ncclComm* c = make_comm(nullptr, nranks, rank, 0);
  c->blocking = blocking;
  if (blocking) {
    const ncclResult_t r = attach(c, commId);
    if (r != ncclSuccess) {
      free_comm(c);
      return r;
    }
    *comm = c;
    return ncclSuccess;
  }
  c->initState.store(ncclInProgress, std::memory_order_release);
  *comm = c;
  std::thread([c, commId] { c->initState.store(attach(c, commId), std::memory_order_release); }).detach();
  return ncclInProgress;
}

ncclUniqueId child_id(const char* what, std::uint64_t parent, const std::string& detail) {
  Id id{};
  std::memcpy(id.magic, "simnccl", 8);
  std::snprintf(id.desc, sizeof(id.desc), "%s:%llx:%s", what, static_cast<unsigned long long>(parent), detail.c_str());
  id.hash = fnv1a(id.desc, sizeof(id.desc));
  ncclUniqueId out;
  std::memcpy(out.internal, &id, sizeof(id));
  return out;
}

// Every rank tells the others its colour and key through an all-gather on the parent; the ranks
// of one colour, ordered by key then parent rank, form a child whose id derives from the parent's,
// the colour and the number of splits so far. The parent's earlier work finishes first.
ncclResult_t split_into(ncclComm* comm, int color, int key, unsigned nth, bool blocking, ncclComm_t* newcomm) {
  wait_idle(comm);
  int mine[2] = {color, key};
  std::vector<int> all(2 * static_cast<std::size_t>(comm->nranks));
  Task gather{Kind::AllGather, comm, mine, all.data(), 2, ncclInt32, ncclSum, 0, {}, {}};
  if (!run_one(&gather)) return ncclRemoteError;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  std::vector<std::pair<std::pair<int, int>, int>> members;
  for (int r = 0; r < comm->nranks; ++r)
    if (all[2 * std::size_t(r)] == color) members.push_back({{all[2 * std::size_t(r) + 1], r}, r});
  std::sort(members.begin(), members.end());
  int newrank = 0;
  for (std::size_t i = 0; i < members.size(); ++i)
    if (members[i].second == comm->rank) newrank = int(i);
  ncclComm_t child = nullptr;
  const ncclResult_t r =
      init_comm(&child, int(members.size()),
                child_id("split", comm->id_hash, std::to_string(color) + ":" + std::to_string(nth)), newrank, true);
  if (r != ncclSuccess) return r;
  child->blocking = blocking;
  *newcomm = child;  // filled only once the child is complete, as NCCL >= 2.23 does
  return ncclSuccess;
}

// init.cc ncclCommInitChildComm: *newcomm stays NULL until the child is complete; for a
// non-blocking child that happens on a thread, and the parent reports ncclInProgress meanwhile.
ncclResult_t make_child(ncclComm* parent, bool blocking, ncclComm_t* newcomm,
                        std::function<ncclResult_t(ncclComm_t*)> build) {
  *newcomm = nullptr;
  if (blocking) return build(newcomm);
  parent->initState.store(ncclInProgress, std::memory_order_release);
  std::thread([parent, newcomm, build = std::move(build)] {
    parent->initState.store(build(newcomm), std::memory_order_release);
  }).detach();
  return ncclInProgress;
}

}  // namespace

extern "C" {

ncclResult_t pncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* pncclGetLastError(ncclComm_t) { return ""; }

// The n-th call returns the same id in every rank of one launch: it is derived from what the
// launcher exports, so test programs need no out-of-band exchange of the id.
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (!uniqueId) return ncclInvalidArgument;
  static std::atomic<unsigned> counter{0};
  unsigned n = counter.fetch_add(1);
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  const char* run = std::getenv("TORCHELASTIC_RUN_ID");
  Id id{};
  std::memcpy(id.magic, "simnccl", 8);
  if (port || run) {
    std::snprintf(id.desc, sizeof(id.desc), "%u:%s:%s:%s:%u", static_cast<unsigned>(getuid()), addr ? addr : "",
                  port ? port : "", run ? run : "", n);
  } else {
    // No launcher: unique to this process.
    auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    std::snprintf(id.desc, sizeof(id.desc), "local:%d:%lld:%u", static_cast<int>(getpid()), static_cast<long long>(now),
                  n);
  }
  id.hash = fnv1a(id.desc, sizeof(id.desc));
  std::memcpy(uniqueId->internal, &id, sizeof(id));
  return ncclSuccess;
}

ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_comm(comm, nranks, commId, rank, true);
}

ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config) {
  return init_comm(comm, nranks, commId, rank, config_blocking(config, true));
}

// init.cc ncclCommInitRankScalable (NCCL >= 2.23): nId roots share the bootstrap of a large job; every rank is given
// all of their ids. The rendezvous here needs only one of them: the first.
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                       ncclConfig_t* config) {
  if (nId < 1 || !commIds) return ncclInvalidArgument;
  return init_comm(newcomm, nranks, commIds[0], myrank, config_blocking(config, true));
}

ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (!comm || !newcomm) return ncclInvalidArgument;
  if (!comm->ready()) return ncclInvalidArgument;  // ncclCommEnsureReady
  const bool blocking = config ? config_blocking(config, true) : comm->blocking;
  const unsigned nth = comm->splits.fetch_add(1);
  return make_child(comm, blocking, newcomm, [comm, color, key, nth, blocking](ncclComm_t* out) {
    return split_into(comm, color, key, nth, blocking, out);
  });
}

// init.cc ncclCommShrink (NCCL >= 2.27): the parent without the excluded ranks (which must not call it), in parent-rank
// order. Like NCCL, the list is sorted in place.
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                             ncclConfig_t* config, int shrinkFlags) {
  (void)shrinkFlags;
  if (!comm || !newcomm || !excludeRanksList || excludeRanksCount <= 0) return ncclInvalidArgument;
  std::sort(excludeRanksList, excludeRanksList + excludeRanksCount);
  if (std::binary_search(excludeRanksList, excludeRanksList + excludeRanksCount, comm->rank))
    return ncclInvalidArgument;
  if (!comm->ready()) return ncclInvalidArgument;
  const bool blocking = config ? config_blocking(config, true) : comm->blocking;
  std::string excluded = std::to_string(comm->shrinks.fetch_add(1));
  int below = 0;
  for (int i = 0; i < excludeRanksCount; ++i) {
    excluded += ',';
    excluded += std::to_string(excludeRanksList[i]);
    if (excludeRanksList[i] < comm->rank) ++below;
  }
  const int size = comm->nranks - excludeRanksCount, rank = comm->rank - below;
  return make_child(comm, blocking, newcomm, [comm, excluded, size, rank, blocking](ncclComm_t* out) {
    wait_idle(comm);
    ncclComm_t child = nullptr;
    const ncclResult_t r = init_comm(&child, size, child_id("shrink", comm->id_hash, excluded), rank, true);
    if (r != ncclSuccess) return r;
    child->blocking = blocking;
    *out = child;
    return ncclSuccess;
  });
}

ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  if (!comm || ndev < 1) return ncclInvalidArgument;
  ncclUniqueId id;
  // A process-local id: the launcher's environment must not make it collide with other ranks.
  Id local{};
  std::memcpy(local.magic, "simnccl", 8);
  std::snprintf(local.desc, sizeof(local.desc), "all:%d:%lld", static_cast<int>(getpid()),
                static_cast<long long>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::memcpy(id.internal, &local, sizeof(local));
  std::string name = segment_name(id);
  std::size_t bytes = segment_bytes(ndev);
  int saved = 0;
  cudaGetDevice(&saved);
  for (int r = 0; r < ndev; ++r) {
    Header* h = open_segment(name, ndev, bytes);
    if (!h) {
      for (int k = 0; k < r; ++k) free_comm(comm[k]);
      unlink_shared(name);
      return ncclSystemError;
    }
    comm[r] = make_comm(h, ndev, r, bytes);
    comm[r]->device = devlist ? devlist[r] : r;
  }
  unlink_shared(name);
  cudaSetDevice(saved);
  return ncclSuccess;
}

ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  wait_idle(comm);
  return ncclSuccess;
}

ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  free_comm(comm);
  return ncclSuccess;
}

ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  // Pending operations of this and the other ranks stop waiting and report an error.
  comm->aborted.store(true);
  at(comm->hdr->aborted).store(1, std::memory_order_release);
  free_comm(comm);
  return ncclSuccess;
}

// init.cc ncclCommGetAsyncError: ncclInProgress while an init, split or group launch is still
// running, then that operation's result, then errors of the work itself.
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (!comm || !asyncError) return ncclInvalidArgument;
  const int state = comm->initState.load(std::memory_order_acquire);
  *asyncError = static_cast<ncclResult_t>(state != ncclSuccess ? state : comm->async_error.load());
  return ncclSuccess;
}

ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  if (!comm->ready()) return ncclInvalidArgument;  // ncclCommEnsureReady
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!comm || !device) return ncclInvalidArgument;
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  if (!comm->ready()) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  return cudaMalloc(ptr, size) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

ncclResult_t pncclMemFree(void* ptr) { return cudaFree(ptr) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError; }

ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream) {
  return collective(Kind::AllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                         int root, ncclComm_t comm, cudaStream_t stream) {
  return collective(Kind::Reduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                            ncclComm_t comm, cudaStream_t stream) {
  // Only the root's sendbuff is read.
  const void* send = (comm && comm->rank != root) ? recvbuff : sendbuff;
  return collective(Kind::Broadcast, send, recvbuff, count, datatype, ncclSum, root, comm, stream);
}

ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream) {
  return collective(Kind::AllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream);
}

ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return collective(Kind::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}

ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  return p2p(true, sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream) {
  return p2p(false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t pncclGroupStart() {
  ++tls_group_depth;
  return ncclSuccess;
}

ncclResult_t pncclGroupEnd() {
  if (tls_group_depth == 0) return ncclInvalidUsage;
  if (--tls_group_depth > 0) return ncclSuccess;
  return flush_group();
}

// group.cc ncclGroupSimulateEnd: a group end that plans the group's work and launches none of it;
// with a null simInfo it is an ordinary ncclGroupEnd.
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (!simInfo) return pncclGroupEnd();
  if (tls_group_depth == 0) return ncclInvalidUsage;
  if (--tls_group_depth > 0) return ncclSuccess;
  std::vector<Queued> discarded = std::move(tls_group_ops);
  tls_group_ops.clear();
  if (simInfo->magic != 0x74685283) return ncclInvalidArgument;  // not NCCL_SIM_INFO_INITIALIZER
  double bytes = 0;
  for (const Queued& q : discarded) {
    bytes += double(q.task.count * type_size(q.task.type));
    for (const P2POp& o : q.task.p2p) bytes += double(o.bytes);
  }
  simInfo->estimatedTime = float(bytes / 1e4);  // microseconds at 10 GB/s
  return ncclSuccess;
}

// collectives.cc ncclAlltoAll, ncclGather, ncclScatter (NCCL >= 2.28): each rank's buffer in
// `count`-element blocks, one per peer (all to all), from every rank to the root (gather), from
// the root to every rank (scatter).
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream) {
  return exchange(comm, stream, sendbuff, recvbuff, count, datatype, 0, true, true);
}

ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  return exchange(comm, stream, sendbuff, recvbuff, count, datatype, root, false, true);
}

ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream) {
  return exchange(comm, stream, sendbuff, recvbuff, count, datatype, root, true, false);
}

}  // extern "C"

// The public names are weak aliases of the pnccl* definitions, as in the real library, so that
// a profiler can interpose on either.
#define SIMNCCL_ALIAS(name) extern "C" decltype(p##name) name __attribute__((weak, alias("p" #name)));
SIMNCCL_ALIAS(ncclGetVersion)
SIMNCCL_ALIAS(ncclGetErrorString)
SIMNCCL_ALIAS(ncclGetLastError)
SIMNCCL_ALIAS(ncclGetUniqueId)
SIMNCCL_ALIAS(ncclCommInitRank)
SIMNCCL_ALIAS(ncclCommInitRankConfig)
SIMNCCL_ALIAS(ncclCommInitRankScalable)
SIMNCCL_ALIAS(ncclCommShrink)
SIMNCCL_ALIAS(ncclCommInitAll)
SIMNCCL_ALIAS(ncclCommSplit)
SIMNCCL_ALIAS(ncclCommFinalize)
SIMNCCL_ALIAS(ncclCommDestroy)
SIMNCCL_ALIAS(ncclCommAbort)
SIMNCCL_ALIAS(ncclCommGetAsyncError)
SIMNCCL_ALIAS(ncclCommCount)
SIMNCCL_ALIAS(ncclCommCuDevice)
SIMNCCL_ALIAS(ncclCommUserRank)
SIMNCCL_ALIAS(ncclMemAlloc)
SIMNCCL_ALIAS(ncclMemFree)
SIMNCCL_ALIAS(ncclAllReduce)
SIMNCCL_ALIAS(ncclReduce)
SIMNCCL_ALIAS(ncclBroadcast)
SIMNCCL_ALIAS(ncclBcast)
SIMNCCL_ALIAS(ncclAllGather)
SIMNCCL_ALIAS(ncclReduceScatter)
SIMNCCL_ALIAS(ncclSend)
SIMNCCL_ALIAS(ncclRecv)
SIMNCCL_ALIAS(ncclGroupStart)
SIMNCCL_ALIAS(ncclGroupEnd)
SIMNCCL_ALIAS(ncclGroupSimulateEnd)
SIMNCCL_ALIAS(ncclAlltoAll)
SIMNCCL_ALIAS(ncclGather)
SIMNCCL_ALIAS(ncclScatter)
