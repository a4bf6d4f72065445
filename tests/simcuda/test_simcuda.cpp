// Tests of the simulated CUDA runtime and NCCL. Ordering is checked with gates (operations that
// hold a stream until the test opens them), not with timing thresholds, so nothing can flake.
#include <cupti.h>
#include <fatbinary_section.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <time.h>

#include "simcuda.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

// Exported by libcudart; the header declares it only for per-thread-default-stream builds.
extern "C" cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);

namespace {

// Two simulated devices for the multi-device tests; read by the runtime at its first call.
const bool kTwoDevices = setenv("SIMCUDA_DEVICES", "2", 0) == 0;

// An operation that keeps its stream busy until open() is called. The flag lives on the heap,
// shared with the operation, because the operation may still poll it after the Gate is gone.
class Gate {
 public:
  explicit Gate(cudaStream_t s) : opened_(std::make_shared<std::atomic<bool>>(false)) {
    EXPECT_EQ(simcudaEnqueue(s, &Gate::run, new std::shared_ptr<std::atomic<bool>>(opened_)), cudaSuccess);
  }
  ~Gate() {
    open();
    join();
  }
  void open() { opened_->store(true); }
  // Opens the gate from another thread after a delay; `flag` is set just before opening.
  void open_later(std::atomic<bool>& flag, int ms = 50) {
    opener_ = std::thread([opened = opened_, &flag, ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      flag.store(true);
      opened->store(true);
    });
  }
  void join() {
    if (opener_.joinable()) opener_.join();
  }

 private:
  static void run(void* arg) {
    auto* flag = static_cast<std::shared_ptr<std::atomic<bool>>*>(arg);
    while (!(*flag)->load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    delete flag;
  }
  std::shared_ptr<std::atomic<bool>> opened_;
  std::thread opener_;
};

// Appends `value` to a log when the stream reaches it.
struct OrderLog {
  std::mutex mu;
  std::vector<int> seen;
  struct Entry {
    OrderLog* log;
    int value;
  };
  std::vector<std::unique_ptr<Entry>> entries;
  void mark(cudaStream_t s, int value) {
    entries.push_back(std::make_unique<Entry>(Entry{this, value}));
    ASSERT_EQ(simcudaEnqueue(s, &OrderLog::run, entries.back().get()), cudaSuccess);
  }
  static void run(void* p) {
    auto* e = static_cast<Entry*>(p);
    std::lock_guard lock(e->log->mu);
    e->log->seen.push_back(e->value);
  }
};

std::vector<unsigned char> pattern(std::size_t n, int seed) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<unsigned char>((i * 31 + static_cast<std::size_t>(seed)) & 0xff);
  return v;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  pclose(p);
  return out;
}

std::set<std::string> shm_entries() {
  std::set<std::string> names;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind("simnccl-", 0) == 0) names.insert(e.path().filename().string());
  return names;
}

}  // namespace

TEST(SimCuda, CopiesInAllDirections) {
  const std::size_t n = 1 << 16;
  auto src = pattern(n, 1);
  void *d1 = nullptr, *d2 = nullptr, *pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&d1, n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d2, n), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, n), cudaSuccess);
  std::vector<unsigned char> back(n), hh(n);

  ASSERT_EQ(cudaMemcpy(d1, src.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(pinned, d2, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(pinned, src.data(), n), 0);
  ASSERT_EQ(cudaMemcpy(hh.data(), pinned, n, cudaMemcpyHostToHost), cudaSuccess);
  EXPECT_EQ(hh, src);

  // cudaMemcpyDefault infers the direction.
  auto other = pattern(n, 7);
  ASSERT_EQ(cudaMemcpy(d1, other.data(), n, cudaMemcpyDefault), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d1, n, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(back, other);

  // Async copies on a stream and the _ptds/_ptsz twins.
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d2, src.data(), n, cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d2, n, cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(std::memcmp(pinned, src.data(), n), 0);
  ASSERT_EQ(cudaMemcpyPeer(d1, 0, d2, 0, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpyPeerAsync(d2, 0, d1, 0, n, s), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d2, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, src);

  // Memset, synchronous and async.
  ASSERT_EQ(cudaMemset(d1, 0xab, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d1, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, std::vector<unsigned char>(n, 0xab));
  ASSERT_EQ(cudaMemsetAsync(d1, 0x11, n / 2, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), d1, n, cudaMemcpyDeviceToHost, s), cudaSuccess);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], i < n / 2 ? 0x11 : 0xab) << i;

  // 2D: a 16x8 block out of a 40-byte-pitch host image into a 64-byte-pitch device image and back.
  const std::size_t w = 16, h = 8, hp = 40, dp = 64;
  auto img = pattern(hp * h, 3);
  std::vector<unsigned char> img2(hp * h, 0);
  ASSERT_EQ(cudaMemset(d1, 0, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpy2D(d1, dp, img.data(), hp, w, h, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy2DAsync(img2.data(), hp, d1, dp, w, h, cudaMemcpyDeviceToHost, s), cudaSuccess);
  for (std::size_t y = 0; y < h; ++y)
    for (std::size_t x = 0; x < hp; ++x) ASSERT_EQ(img2[y * hp + x], x < w ? img[y * hp + x] : 0) << y << "," << x;
  ASSERT_EQ(cudaMemcpy(back.data(), d1, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back[dp - 1], 0);  // the pitch padding stays untouched
  EXPECT_EQ(back[dp], img[hp]);
  EXPECT_EQ(cudaMemcpy2D(d1, 8, img.data(), hp, w, h, cudaMemcpyHostToDevice), cudaErrorInvalidPitchValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidPitchValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);

  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(d1), cudaSuccess);
  EXPECT_EQ(cudaFree(d2), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

TEST(SimCuda, OperationsOnOneStreamRunInOrder) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  int* d = nullptr;
  int* pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(int), cudaHostAllocDefault), cudaSuccess);
  *pinned = -1;
  OrderLog log;
  {
    Gate gate(s);
    log.mark(s, 1);
    ASSERT_EQ(cudaMemsetAsync(d, 1, sizeof(int), s), cudaSuccess);
    ASSERT_EQ(simcudaBusy(s, 2000), cudaSuccess);
    log.mark(s, 2);
    ASSERT_EQ(cudaMemsetAsync(d, 2, sizeof(int), s), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(pinned, d, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
    log.mark(s, 3);
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    EXPECT_EQ(*pinned, -1);  // nothing ran past the gate
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  EXPECT_EQ(*pinned, 0x02020202);
  EXPECT_EQ(log.seen, (std::vector<int>{1, 2, 3}));
  cudaFree(d);
  cudaFreeHost(pinned);
  cudaStreamDestroy(s);
}

TEST(SimCuda, EventsQueryAndElapsedTime) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaEvent_t a, b, untimed;
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&b, cudaEventDefault), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(b), cudaSuccess);  // never recorded
  {
    Gate gate(s);
    ASSERT_EQ(cudaEventRecord(a, s), cudaSuccess);
    ASSERT_EQ(simcudaBusy(s, 50000), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(b, s), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(untimed, s), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(a), cudaErrorNotReady);
    EXPECT_EQ(cudaEventQuery(b), cudaErrorNotReady);
    float ms = 0;
    EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaErrorNotReady);
  }
  ASSERT_EQ(cudaEventSynchronize(b), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(a), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(b), cudaSuccess);
  float ms = 0;
  ASSERT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
  EXPECT_GE(ms, 49.9f);  // sleep_for never sleeps less than asked
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, untimed), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaEventDestroy(untimed);
  cudaStreamDestroy(s);
}

TEST(SimCuda, PageableAsyncCopyBlocksPinnedDoesNot) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  const std::size_t n = 4096;
  auto src = pattern(n, 5);
  void* d = nullptr;
  void* pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, n), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, src.data(), n, cudaMemcpyHostToDevice), cudaSuccess);

  // Pinned D2H returns while the stream is still held: the copy has not happened yet.
  {
    std::memset(pinned, 0, n);
    Gate gate(s);
    ASSERT_EQ(cudaMemcpyAsync(pinned, d, n, cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    EXPECT_EQ(static_cast<unsigned char*>(pinned)[0], 0);
    gate.open();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(std::memcmp(pinned, src.data(), n), 0);
  }
  // Pageable D2H returns only after the stream reached and finished the copy.
  {
    std::vector<unsigned char> pageable(n, 0);
    std::atomic<bool> opened{false};
    Gate gate(s);
    gate.open_later(opened);
    ASSERT_EQ(cudaMemcpyAsync(pageable.data(), d, n, cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_TRUE(opened.load());
    EXPECT_EQ(pageable, src);
    gate.join();
  }
  // Pageable H2D: the bytes are taken before the call returns, so reusing the buffer is safe.
  {
    auto staged = pattern(n, 9);
    std::atomic<bool> opened{false};
    Gate gate(s);
    gate.open_later(opened);
    ASSERT_EQ(cudaMemcpyAsync(d, staged.data(), n, cudaMemcpyHostToDevice, s), cudaSuccess);
    EXPECT_TRUE(opened.load());
    std::vector<unsigned char> expect = staged;
    std::fill(staged.begin(), staged.end(), 0);
    ASSERT_EQ(cudaMemcpy(pinned, d, n, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(pinned, expect.data(), n), 0);
    gate.join();
  }
  // Pinned via cudaHostRegister counts as pinned.
  {
    std::vector<unsigned char> reg(n, 0);
    ASSERT_EQ(cudaHostRegister(reg.data(), n, cudaHostRegisterDefault), cudaSuccess);
    Gate gate(s);
    ASSERT_EQ(cudaMemcpyAsync(reg.data(), d, n, cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    gate.open();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(cudaHostUnregister(reg.data()), cudaSuccess);
  }
  cudaFree(d);
  cudaFreeHost(pinned);
  cudaStreamDestroy(s);
}

TEST(SimCuda, PointerAttributes) {
  void *d = nullptr, *h1 = nullptr, *h2 = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 1000), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&h1, 1000), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(&h2, 1000, cudaHostAllocPortable), cudaSuccess);
  std::vector<char> heap(1000);
  int stack = 0;
  cudaPointerAttributes a{};

  ASSERT_EQ(cudaPointerGetAttributes(&a, d), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  EXPECT_EQ(a.devicePointer, d);
  EXPECT_EQ(a.hostPointer, nullptr);
  ASSERT_EQ(cudaPointerGetAttributes(&a, static_cast<char*>(d) + 999), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  ASSERT_EQ(cudaPointerGetAttributes(&a, static_cast<char*>(d) + 1000), cudaSuccess);
  EXPECT_NE(a.type, cudaMemoryTypeDevice);

  for (void* h : {h1, h2}) {
    ASSERT_EQ(cudaPointerGetAttributes(&a, h), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeHost);
    EXPECT_EQ(a.hostPointer, h);
    EXPECT_EQ(a.devicePointer, h);
  }
  ASSERT_EQ(cudaPointerGetAttributes(&a, heap.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  ASSERT_EQ(cudaPointerGetAttributes(&a, &stack), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);

  ASSERT_EQ(cudaHostRegister(heap.data(), heap.size(), cudaHostRegisterDefault), cudaSuccess);
  EXPECT_EQ(cudaHostRegister(heap.data() + 10, 10, cudaHostRegisterDefault), cudaErrorHostMemoryAlreadyRegistered);
  ASSERT_EQ(cudaPointerGetAttributes(&a, heap.data() + 500), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaHostUnregister(heap.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(heap.data()), cudaErrorHostMemoryNotRegistered);
  ASSERT_EQ(cudaPointerGetAttributes(&a, heap.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);

  ASSERT_EQ(cudaFree(d), cudaSuccess);
  ASSERT_EQ(cudaPointerGetAttributes(&a, d), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(cudaFree(h1), cudaErrorInvalidValue);  // pinned memory is freed with cudaFreeHost
  EXPECT_EQ(cudaFreeHost(h1), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(h2), cudaSuccess);
  cudaGetLastError();
}

TEST(SimCuda, StreamWaitEventOrdersAcrossStreams) {
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithPriority(&b, cudaStreamNonBlocking, -1), cudaSuccess);
  cudaEvent_t ev;
  ASSERT_EQ(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
  OrderLog log;
  {
    Gate gate(a);
    log.mark(a, 1);
    ASSERT_EQ(cudaEventRecord(ev, a), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(b, ev, 0), cudaSuccess);
    log.mark(b, 2);
    // b is held by the event although its own queue has nothing else.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(cudaStreamQuery(b), cudaErrorNotReady);
    {
      std::lock_guard lock(log.mu);
      EXPECT_TRUE(log.seen.empty());
    }
  }
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(log.seen, (std::vector<int>{1, 2}));
  cudaEventDestroy(ev);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

TEST(SimCuda, LegacyDefaultStreamSynchronisesWithBlockingStreams) {
  cudaStream_t blocking, nonblocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  {
    Gate held(blocking);
    ASSERT_EQ(cudaMemsetAsync(d, 0, 64, nullptr), cudaSuccess);  // waits for `blocking`
    EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);
    EXPECT_EQ(cudaStreamQuery(cudaStreamPerThread), cudaErrorNotReady);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  {
    Gate held(nonblocking);
    ASSERT_EQ(cudaMemsetAsync(d, 0, 64, cudaStreamLegacy), cudaSuccess);  // does not wait
    ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(nonblocking), cudaErrorNotReady);
  }
  ASSERT_EQ(cudaStreamSynchronize_ptsz(nonblocking), cudaSuccess);
  // cudaFree synchronises the device.
  {
    std::atomic<bool> opened{false};
    Gate held(nonblocking);
    held.open_later(opened);
    ASSERT_EQ(cudaFree(d), cudaSuccess);
    EXPECT_TRUE(opened.load());
    held.join();
  }
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(nonblocking);
}

TEST(SimCuda, DeviceAndErrorApi) {
  int n = 0, dev = -1, v = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_GE(n, 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cudaSetDevice(n), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorNotReady), "cudaErrorNotReady");
  EXPECT_STREQ(cudaGetErrorString(cudaSuccess), "no error");
  ASSERT_EQ(cudaRuntimeGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, CUDART_VERSION);
  ASSERT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_GE(v, CUDART_VERSION);
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(nullptr, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);
  ASSERT_TRUE(kTwoDevices);
  char buf[4];
  EXPECT_EQ(cudaMemcpy(buf, buf, 4, static_cast<cudaMemcpyKind>(17)), cudaErrorInvalidMemcpyDirection);
  cudaGetLastError();
}

TEST(SimNccl, InitAllInOneProcess) {
  std::array<ncclComm_t, 3> comms{};
  ASSERT_EQ(ncclCommInitAll(comms.data(), 3, nullptr), ncclSuccess);
  std::array<cudaStream_t, 3> streams{};
  std::array<double*, 3> bufs{};
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&bufs[r]), 3000 * sizeof(double)), cudaSuccess);
    std::vector<double> h(3000, r + 0.5);
    ASSERT_EQ(cudaMemcpy(bufs[r], h.data(), h.size() * sizeof(double), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 3; ++r)
    ASSERT_EQ(ncclAllReduce(bufs[r], bufs[r], 3000, ncclDouble, ncclMax, comms[r], streams[r]), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 3; ++r) {
    std::vector<double> h(3000);
    ASSERT_EQ(cudaMemcpyAsync(h.data(), bufs[r], h.size() * sizeof(double), cudaMemcpyDeviceToHost, streams[r]),
              cudaSuccess);
    for (double x : h) ASSERT_EQ(x, 2.5);
    int rank = -1, count = 0;
    EXPECT_EQ(ncclCommUserRank(comms[r], &rank), ncclSuccess);
    EXPECT_EQ(ncclCommCount(comms[r], &count), ncclSuccess);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(count, 3);
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
    cudaFree(bufs[r]);
    cudaStreamDestroy(streams[r]);
  }
  int version = 0;
  EXPECT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION_CODE);
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
}

namespace {
// Small whole numbers (1 to 127) in the types gradients come in, exactly.
std::vector<std::uint8_t> encoded(ncclDataType_t type, int v) {
  auto bytes = [](auto x) {
    std::vector<std::uint8_t> b(sizeof x);
    std::memcpy(b.data(), &x, sizeof x);
    return b;
  };
  switch (type) {
    case ncclInt8:
      return bytes(static_cast<std::int8_t>(v));
    case ncclInt32:
      return bytes(static_cast<std::int32_t>(v));
    case ncclFloat32:
      return bytes(static_cast<float>(v));
    case ncclBfloat16: {
      const auto f = static_cast<float>(v);
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      return bytes(static_cast<std::uint16_t>(bits >> 16));
    }
    default: {  // ncclFloat16: the exponent above 2^e, the mantissa's top bits below it
      int e = 0;
      while ((2 << e) <= v) ++e;
      return bytes(static_cast<std::uint16_t>(((e + 15) << 10) | ((v - (1 << e)) << (10 - e))));
    }
  }
}
}  // namespace

// Every reduction, in every type a model's gradients come in, over more than one block of the
// host's reduction loop: rank r holds (r + 1) + i % 4 at element i.
TEST(SimNccl, EveryReductionOfEveryTypeIsExact) {
  constexpr int kRanks = 3;
  constexpr std::size_t kCount = 5000;
  std::array<ncclComm_t, kRanks> comms{};
  ASSERT_EQ(ncclCommInitAll(comms.data(), kRanks, nullptr), ncclSuccess);
  std::array<cudaStream_t, kRanks> streams{};
  std::array<void*, kRanks> bufs{};
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&bufs[r], kCount * 4), cudaSuccess);
  }
  // The result at element i, k = i % 4, over the values 1 + k, 2 + k, 3 + k.
  const std::vector<std::pair<ncclRedOp_t, std::function<int(int)>>> ops = {
      {ncclSum, [](int k) { return 6 + 3 * k; }},
      {ncclAvg, [](int k) { return 2 + k; }},
      {ncclProd, [](int k) { return (1 + k) * (2 + k) * (3 + k); }},
      {ncclMax, [](int k) { return 3 + k; }},
      {ncclMin, [](int k) { return 1 + k; }}};
  for (ncclDataType_t type : {ncclInt8, ncclInt32, ncclFloat32, ncclBfloat16, ncclFloat16}) {
    const std::size_t size = encoded(type, 0).size();
    for (const auto& [op, result] : ops) {
      if (op == ncclAvg && (type == ncclInt8 || type == ncclInt32)) continue;  // NCCL averages floats only
      for (int r = 0; r < kRanks; ++r) {
        std::vector<std::uint8_t> h;
        for (std::size_t i = 0; i < kCount; ++i) {
          auto v = encoded(type, r + 1 + static_cast<int>(i % 4));
          h.insert(h.end(), v.begin(), v.end());
        }
        ASSERT_EQ(cudaMemcpy(bufs[r], h.data(), h.size(), cudaMemcpyHostToDevice), cudaSuccess);
      }
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      for (int r = 0; r < kRanks; ++r)
        ASSERT_EQ(ncclAllReduce(bufs[r], bufs[r], kCount, type, op, comms[r], streams[r]), ncclSuccess);
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
      for (int r = 0; r < kRanks; ++r) {
        std::vector<std::uint8_t> h(kCount * size);
        ASSERT_EQ(cudaMemcpyAsync(h.data(), bufs[r], h.size(), cudaMemcpyDeviceToHost, streams[r]), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(streams[r]), cudaSuccess);
        for (std::size_t i = 0; i < kCount; ++i) {
          auto want = encoded(type, result(static_cast<int>(i % 4)));
          ASSERT_EQ(0, std::memcmp(h.data() + i * size, want.data(), size))
              << "type " << type << ", op " << op << ", rank " << r << ", element " << i;
        }
      }
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
    cudaFree(bufs[r]);
    cudaStreamDestroy(streams[r]);
  }
}

TEST(SimNccl, FourRankAllReduceRendezvous) {
  auto before = shm_entries();
  std::string cmd = std::string(SIMCUDA_SIMRUN) + " -n 4 -- " + SIMCUDA_ALLREDUCE_PROG + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  for (int r = 0; r < 4; ++r) EXPECT_NE(out.find("rank " + std::to_string(r) + "/4: ok"), std::string::npos) << out;
  // No shared-memory segment is left behind.
  for (auto& name : shm_entries()) EXPECT_TRUE(before.count(name)) << "left in /dev/shm: " << name;
}

TEST(SimAbi, CudartSymbolsCarryTheRealVersion) {
  std::string out = run(std::string("objdump -T ") + SIMCUDART_PATH);
  for (const char* sym : {"cudaMemcpy", "cudaMemcpyAsync", "cudaMemcpyAsync_ptsz", "cudaMemcpy_ptds",
                          "cudaStreamSynchronize", "cudaEventRecord_ptsz", "cudaMalloc", "simcudaBusy"})
    EXPECT_NE(out.find(std::string("libcudart.so.13 ") + sym + "\n"), std::string::npos) << sym;
  // Nothing else is exported.
  EXPECT_EQ(out.find("simcuda::"), std::string::npos);
  std::string dyn = run(std::string("objdump -p ") + SIMCUDART_PATH);
  EXPECT_NE(dyn.find("SONAME               libcudart.so.13"), std::string::npos) << dyn;
}

TEST(SimAbi, NcclExportsWeakPublicAndGlobalProfilingNames) {
  std::string out = run(std::string("objdump -T ") + SIMNCCL_PATH);
  auto line = [&](const std::string& sym) {
    std::size_t pos = out.find(" " + sym + "\n");
    if (pos == std::string::npos) return std::string();
    std::size_t start = out.rfind('\n', pos);
    return out.substr(start == std::string::npos ? 0 : start + 1, pos - start);
  };
  for (const char* name : {"AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Send", "Recv", "GetUniqueId",
                           "CommInitRank", "CommDestroy", "GroupStart", "GroupEnd"}) {
    std::string pub = line(std::string("nccl") + name), prof = line(std::string("pnccl") + name);
    EXPECT_NE(pub.find(" w "), std::string::npos) << name << ": " << pub;
    EXPECT_NE(prof.find(" g "), std::string::npos) << name << ": " << prof;
  }
  std::string dyn = run(std::string("objdump -p ") + SIMNCCL_PATH);
  EXPECT_NE(dyn.find("SONAME               libnccl.so.2"), std::string::npos) << dyn;
}

TEST(SimCuda, ProcessExitsWhileStreamsAreBusy) {
  auto start = std::chrono::steady_clock::now();
  std::string out = run(std::string(SIMCUDA_ALLREDUCE_PROG) + " exit-while-busy; echo status=$?");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(out.find("exiting\nstatus=0"), std::string::npos) << out;
  EXPECT_LT(secs, 20.0);  // the queued work would take 60 s
}

#ifdef SIMCUDA_REALABI_PROG
TEST(SimAbi, ProgramLinkedAgainstRealLibrariesRunsOnTheSimulation) {
  std::string cmd = std::string("LD_LIBRARY_PATH=") + SIMCUDA_LIBDIR + " " + SIMCUDA_REALABI_PROG + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[1024];
  while (std::size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << ": " << out;
}
#endif

// ---- errors ----

TEST(SimCuda, LastErrorIsPendingUntilReadAndPerThread) {
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(reinterpret_cast<cudaStream_t>(0x10)), cudaErrorInvalidResourceHandle);
  // Later successful calls leave it pending; a peek does not clear it.
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidResourceHandle);
  // Another thread has its own.
  cudaError_t other = cudaErrorUnknown;
  std::thread([&] { other = cudaPeekAtLastError(); }).join();
  EXPECT_EQ(other, cudaSuccess);
  // A newer failure replaces it.
  EXPECT_EQ(cudaSetDevice(99), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // cudaErrorNotReady is a status, never recorded.
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  {
    Gate gate(s);
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  }
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
}

// ---- several devices ----

TEST(SimCuda, EventRecordedOnAnotherDevicesStreamFails) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_EQ(count, 2);
  cudaEvent_t on0, on1;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&on0), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&on1), cudaSuccess);
  cudaStream_t s1;
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  int device = -1;
  ASSERT_EQ(cudaStreamGetDevice(s1, &device), cudaSuccess);
  EXPECT_EQ(device, 1);
  EXPECT_EQ(cudaEventRecord(on0, s1), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventRecord(on1, s1), cudaSuccess);
  // The legacy stream is the current device's.
  EXPECT_EQ(cudaEventRecord(on1, nullptr), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(on0, nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  // An event of another device may be waited for and queried from any device.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(on1), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(on1), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, on0, on1), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  cudaEventDestroy(on0);
  cudaEventDestroy(on1);
  cudaStreamDestroy(s1);
}

// ---- stream capture ----

namespace {

cudaStreamCaptureStatus capture_status(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  return status;
}

// Runs fn on a new thread whose capture mode is `mode`, and returns what it returned.
cudaError_t on_thread(cudaStreamCaptureMode mode, const std::function<cudaError_t()>& fn) {
  cudaError_t result = cudaErrorUnknown;
  std::thread([&] {
    cudaStreamCaptureMode m = mode;
    EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
    EXPECT_EQ(m, cudaStreamCaptureModeGlobal) << "every thread starts in global mode";
    result = fn();
    cudaGetLastError();
  }).join();
  return result;
}

}  // namespace

TEST(SimCapture, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  int* counter = nullptr;
  int* host = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&host), sizeof(int)), cudaSuccess);
  *host = 7;
  ASSERT_EQ(cudaMemset(counter, 0, sizeof(int)), cudaSuccess);
  cudaEvent_t start, end;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&end), cudaSuccess);

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(capture_status(s), cudaStreamCaptureStatusActive);
  cudaStreamCaptureStatus status;
  unsigned long long id = 0;
  cudaGraph_t capturing = nullptr;
  ASSERT_EQ(cudaStreamGetCaptureInfo(s, &status, &id, &capturing, nullptr, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  EXPECT_NE(id, 0u);
  ASSERT_EQ(cudaEventRecord(start, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(counter, host, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(end, s), cudaSuccess);
  // Events last recorded in a capture may not be queried.
  EXPECT_EQ(cudaEventQuery(end), cudaErrorCapturedEvent);
  cudaGetLastError();
  // The query invalidated the capture.
  EXPECT_EQ(capture_status(s), cudaStreamCaptureStatusInvalidated);
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(0x1);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(capture_status(s), cudaStreamCaptureStatusNone);

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(start, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(counter, host, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(end, s), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_NE(graph, nullptr);
  int seen = -1;
  ASSERT_EQ(cudaMemcpy(&seen, counter, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(seen, 0) << "captured work must not run at capture";

  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int launch = 1; launch <= 3; ++launch) {
    *host = 100 + launch;
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&seen, counter, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(seen, 100 + launch);
    // Launched, the events are ordinary recorded events again.
    EXPECT_EQ(cudaEventQuery(end), cudaSuccess);
    float ms = -1;
    EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaFree(counter);
  cudaFreeHost(host);
  cudaStreamDestroy(s);
}

TEST(SimCapture, GlobalCaptureForbidsUnsafeCallsOfThreadsNotRelaxed) {
  cudaStream_t s, other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t before;  // recorded before the capture, as a watchdog's event is
  ASSERT_EQ(cudaEventCreate(&before), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(before, other), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 64), cudaSuccess);
  const std::vector<std::pair<std::string, std::function<cudaError_t()>>> unsafe = {
      {"cudaEventQuery", [&] { return cudaEventQuery(before); }},
      {"cudaEventSynchronize", [&] { return cudaEventSynchronize(before); }},
      {"cudaStreamSynchronize", [&] { return cudaStreamSynchronize(other); }},
      {"cudaStreamQuery", [&] { return cudaStreamQuery(other); }},
      {"cudaMalloc",
       [&] {
         void* p = nullptr;
         return cudaMalloc(&p, 16);
       }},
      {"cudaPointerGetAttributes",
       [&] {
         cudaPointerAttributes attributes;
         return cudaPointerGetAttributes(&attributes, device);
       }},
  };
  for (const auto& [name, call] : unsafe) {
    SCOPED_TRACE(name);
    cudaGraph_t graph = nullptr;
    // Global capture, another thread in global mode: the call fails and the capture is lost.
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(on_thread(cudaStreamCaptureModeGlobal, call), cudaErrorStreamCaptureUnsupported);
    EXPECT_EQ(capture_status(s), cudaStreamCaptureStatusInvalidated);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    // The other thread relaxed, or thread-local: allowed, and the capture survives.
    for (auto mode : {cudaStreamCaptureModeRelaxed, cudaStreamCaptureModeThreadLocal}) {
      ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
      EXPECT_EQ(on_thread(mode, call), cudaSuccess);
      ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
      cudaGraphDestroy(graph);
    }
    // A thread-local capture ignores the other threads.
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    EXPECT_EQ(on_thread(cudaStreamCaptureModeGlobal, call), cudaSuccess);
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphDestroy(graph);
    // The capturing thread itself may not, unless it relaxes its own mode.
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    EXPECT_EQ(call(), cudaErrorStreamCaptureUnsupported);
    EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    EXPECT_EQ(call(), cudaSuccess);
    ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphDestroy(graph);
  }
  // Safe calls from another thread never disturb a global capture.
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(on_thread(cudaStreamCaptureModeGlobal,
                      [&] {
                        cudaEvent_t e;
                        cudaStreamCaptureStatus status;
                        if (cudaEventCreate(&e) != cudaSuccess || cudaEventRecord(e, other) != cudaSuccess ||
                            cudaStreamIsCapturing(other, &status) != cudaSuccess)
                          return cudaErrorUnknown;
                        return cudaEventDestroy(e);
                      }),
            cudaSuccess);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  // A capture not in relaxed mode ends on the thread that began it.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(on_thread(cudaStreamCaptureModeRelaxed,
                      [&] {
                        cudaGraph_t g = nullptr;
                        return cudaStreamEndCapture(s, &g);
                      }),
            cudaErrorStreamCaptureWrongThread);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  cudaEventDestroy(before);
  cudaFree(device);
  cudaStreamDestroy(s);
  cudaStreamDestroy(other);
}

TEST(SimCapture, LegacyStreamCannotBeUsedWhileABlockingStreamCaptures) {
  cudaStream_t blocking, nonblocking;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 64), cudaSuccess);
  char host[64] = {};
  cudaGraph_t graph = nullptr;

  ASSERT_EQ(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal), cudaSuccess);
  // Asking is answered with an error, but does not invalidate.
  cudaStreamCaptureStatus status;
  EXPECT_EQ(cudaStreamIsCapturing(nullptr, &status), cudaErrorStreamCaptureImplicit);
  EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureImplicit);
  EXPECT_EQ(capture_status(blocking), cudaStreamCaptureStatusActive);
  // Using it does, whatever the caller's mode.
  EXPECT_EQ(on_thread(cudaStreamCaptureModeRelaxed,
                      [&] { return cudaMemcpyAsync(device, host, 64, cudaMemcpyHostToDevice, nullptr); }),
            cudaErrorStreamCaptureImplicit);
  EXPECT_EQ(capture_status(blocking), cudaStreamCaptureStatusInvalidated);
  EXPECT_EQ(cudaStreamEndCapture(blocking, &graph), cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();

  // A non-blocking stream's capture leaves the legacy stream usable.
  ASSERT_EQ(cudaStreamBeginCapture(nonblocking, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(capture_status(nullptr), cudaStreamCaptureStatusNone);
  EXPECT_EQ(on_thread(cudaStreamCaptureModeRelaxed,
                      [&] { return cudaMemcpyAsync(device, host, 64, cudaMemcpyHostToDevice, nullptr); }),
            cudaSuccess);
  EXPECT_EQ(cudaStreamEndCapture(nonblocking, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  cudaFree(device);
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(nonblocking);
}

// ---- symbol, 3D and batch copies ----

TEST(SimCuda, SymbolThreeDimensionalAndBatchCopies) {
  // A device allocation stands in for a __device__ variable's symbol.
  unsigned char* symbol = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&symbol), 256), cudaSuccess);
  auto src = pattern(256, 4);
  std::vector<unsigned char> back(256, 0);
  ASSERT_EQ(cudaMemcpyToSymbol(symbol, src.data(), 100, 16, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpyFromSymbol(back.data(), symbol, 100, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::vector<unsigned char>(back.begin(), back.begin() + 100),
            std::vector<unsigned char>(src.begin(), src.begin() + 100));
  EXPECT_EQ(cudaMemcpyToSymbol(src.data(), src.data(), 1, 0, cudaMemcpyHostToDevice), cudaErrorInvalidSymbol);
  EXPECT_EQ(cudaMemcpyToSymbol(symbol, src.data(), 200, 100, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyToSymbol(symbol, src.data(), 1, 0, cudaMemcpyDeviceToHost), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);

  // A 3x2x2 box at (1, 1, 0) of an 8x4-pitched host volume into a device volume at its origin.
  auto volume = pattern(8 * 4 * 2, 6);
  std::vector<unsigned char> out(8 * 4 * 2, 0);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, volume.size()), cudaSuccess);
  ASSERT_EQ(cudaMemset(device, 0, volume.size()), cudaSuccess);
  cudaMemcpy3DParms p{};
  p.srcPtr = {volume.data(), 8, 8, 4};
  p.srcPos = {1, 1, 0};
  p.dstPtr = {device, 8, 8, 4};
  p.extent = {3, 2, 2};
  p.kind = cudaMemcpyHostToDevice;
  ASSERT_EQ(cudaMemcpy3D(&p), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out.data(), device, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::size_t z = 0; z < 2; ++z)
    for (std::size_t y = 0; y < 4; ++y)
      for (std::size_t x = 0; x < 8; ++x)
        ASSERT_EQ(out[(z * 4 + y) * 8 + x], x < 3 && y < 2 ? volume[(z * 4 + y + 1) * 8 + x + 1] : 0) << x << y << z;

  // A batch: two copies with one attribute; never on the legacy stream.
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::vector<unsigned char> a(64, 0), b(64, 0);
  void* dsts[2] = {a.data(), b.data()};
  const void* srcs[2] = {symbol + 16, symbol + 32};
  size_t sizes[2] = {64, 32};
  cudaMemcpyAttributes attrs[1] = {};
  attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t first[1] = {0};
  ASSERT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, first, 1, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(std::vector<unsigned char>(a.begin(), a.end()), std::vector<unsigned char>(src.begin(), src.begin() + 64));
  EXPECT_EQ(b[0], src[16]);
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, first, 1, nullptr), cudaErrorInvalidValue);
  attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderInvalid;
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, first, 1, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  cudaStreamDestroy(s);
  cudaFree(device);
  cudaFree(symbol);
}

// ---- kernels and the simulated CUPTI ----

extern "C" {
void** __cudaRegisterFatBinary(void* fatCubin);
void __cudaRegisterFatBinaryEnd(void** fatCubinHandle);
void __cudaUnregisterFatBinary(void** fatCubinHandle);
void __cudaRegisterFunction(void** fatCubinHandle, const char* hostFun, char* deviceFun, const char* deviceName,
                            int thread_limit, uint3* tid, uint3* bid, dim3* bDim, dim3* gDim, int* wSize);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st* stream);
cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem, void* stream);
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                               cudaStream_t stream);
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                  cudaStream_t stream);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
}

namespace {

// What nvcc generates for `__global__ void scale(float* data, int n)` in a .cu file: the host stub
// that `scale<<<grid, block, 0, stream>>>(data, n)` calls, and the module's registration.
void scale(float* data, int n) {
  void* args[] = {&data, &n};
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
  if (__cudaPopCallConfiguration(&grid, &block, &shared, &stream) != cudaSuccess) return;
  static cudaKernel_t handle = nullptr;
  if (!handle) __cudaGetKernel(&handle, reinterpret_cast<const void*>(&scale));
  __cudaLaunchKernel(handle, grid, block, args, shared, stream);
}

const __fatBinC_Wrapper_t kScaleFatbin{FATBINC_MAGIC, FATBINC_VERSION, nullptr, nullptr};
constexpr const char* kScaleName = "_Z5scalePfi";

void** register_scale_module() {
  void** module = __cudaRegisterFatBinary(const_cast<__fatBinC_Wrapper_t*>(&kScaleFatbin));
  __cudaRegisterFunction(module, reinterpret_cast<const char*>(&scale), const_cast<char*>(kScaleName), kScaleName, -1,
                         nullptr, nullptr, nullptr, nullptr, nullptr);
  __cudaRegisterFatBinaryEnd(module);
  return module;
}

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// One activity record as the client read it.
struct Seen {
  CUpti_ActivityKind kind;
  std::string name;
  std::uint64_t start, end;
  std::uint32_t device, context, stream, correlation;
  std::uint64_t bytes;
  std::uint8_t copy_kind, src_kind, dst_kind, flags;
  std::uint32_t value;
  std::uint16_t memory_kind;
  std::int32_t grid_x, block_x;
  // Runtime calls, their external ids and synchronisations
  std::uint32_t cbid = 0, process = 0, thread = 0, result = 0;
  std::uint32_t external_kind = 0;
  std::uint64_t external_id = 0;
  std::uint32_t sync_type = 0, event = 0;
};

// A CUPTI client written from cupti_activity.h: buffers from bufferRequested, records read with
// cuptiActivityGetNextRecord in bufferCompleted.
struct Client {
  static inline std::mutex mu;
  static inline std::condition_variable cv;
  static inline std::vector<Seen> seen;
  static inline std::size_t buffer_size = 1 << 16;
  static inline bool decline = false;  // bufferRequested gives no buffer
  static inline int completed = 0;
  static inline std::set<std::thread::id> completing_threads;
  static inline std::vector<std::size_t> records_per_buffer;
  static inline std::vector<std::set<std::string>> names_per_buffer;

  static void reset() {
    std::lock_guard lock(mu);
    seen.clear();
    buffer_size = 1 << 16;
    decline = false;
    completed = 0;
    completing_threads.clear();
    records_per_buffer.clear();
    names_per_buffer.clear();
  }
  static void register_callbacks() { ASSERT_EQ(cuptiActivityRegisterCallbacks(&requested, &done), CUPTI_SUCCESS); }

  static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    std::lock_guard lock(mu);
    *max_records = 0;
    *size = decline ? 0 : buffer_size;
    *buffer = decline ? nullptr : static_cast<uint8_t*>(std::aligned_alloc(8, buffer_size));
  }
  static void CUPTIAPI done(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    std::vector<Seen> got;
    CUpti_Activity* record = nullptr;
    CUptiResult status;
    while ((status = cuptiActivityGetNextRecord(buffer, valid, &record)) == CUPTI_SUCCESS) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(record) % 8, 0u);
      Seen s{};
      s.kind = record->kind;
      if (record->kind == CUPTI_ACTIVITY_KIND_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        s = {k->kind, k->name, k->start, k->end, k->deviceId, k->contextId, k->streamId, k->correlationId, 0, 0,
             0,       0,       0,        0,      0,           k->gridX,     k->blockX};
      } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
        s = {m->kind,
             "",
             m->start,
             m->end,
             m->deviceId,
             m->contextId,
             m->streamId,
             m->correlationId,
             m->bytes,
             m->copyKind,
             m->srcKind,
             m->dstKind,
             m->flags,
             0,
             0,
             0,
             0};
      } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(record);
        s = {m->kind,  "", m->start, m->end, m->deviceId, m->contextId, m->streamId,   m->correlationId,
             m->bytes, 0,  0,        0,      0,           m->value,     m->memoryKind, 0,
             0};
      } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
        auto* a = reinterpret_cast<CUpti_ActivityAPI*>(record);
        s.start = a->start;
        s.end = a->end;
        s.correlation = a->correlationId;
        s.cbid = a->cbid;
        s.process = a->processId;
        s.thread = a->threadId;
        s.result = a->returnValue;
      } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
        auto* x = reinterpret_cast<CUpti_ActivityExternalCorrelation*>(record);
        s.correlation = x->correlationId;
        s.external_kind = x->externalKind;
        s.external_id = x->externalId;
      } else if (record->kind == CUPTI_ACTIVITY_KIND_SYNCHRONIZATION) {
        auto* y = reinterpret_cast<CUpti_ActivitySynchronization2*>(record);
        s.start = y->start;
        s.end = y->end;
        s.correlation = y->correlationId;
        s.context = y->contextId;
        s.stream = y->streamId;
        s.event = y->cudaEventId;
        s.sync_type = y->type;
        s.result = y->returnValue;
      }
      got.push_back(s);
    }
    EXPECT_EQ(status, CUPTI_ERROR_MAX_LIMIT_REACHED);
    std::free(buffer);
    std::lock_guard lock(mu);
    seen.insert(seen.end(), got.begin(), got.end());
    records_per_buffer.push_back(got.size());
    names_per_buffer.emplace_back();
    for (const Seen& g : got) names_per_buffer.back().insert(g.name);
    completing_threads.insert(std::this_thread::get_id());
    ++completed;
    cv.notify_all();
  }
  static std::vector<Seen> flushed() {
    EXPECT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
    std::lock_guard lock(mu);
    return seen;
  }
};

// Every test starts with CUPTI detached and leaves it so.
class SimCupti : public ::testing::Test {
 protected:
  void SetUp() override {
    Client::reset();
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    EXPECT_EQ(cuptiFinalize(), CUPTI_SUCCESS);
    cudaStreamDestroy(stream_);
  }
  std::uint32_t stream_id(cudaStream_t s) {
    std::uint32_t id = 0;
    EXPECT_EQ(cuptiGetStreamIdEx(nullptr, reinterpret_cast<CUstream>(s), 0, &id), CUPTI_SUCCESS);
    return id;
  }
  cudaStream_t stream_ = nullptr;
};

const void* registered(const char* name, unsigned long long ns) {
  const void* stub = nullptr;
  EXPECT_EQ(simcudaRegisterKernel(name, ns, &stub), cudaSuccess);
  return stub;
}

}  // namespace

TEST_F(SimCupti, KernelsRunInStreamOrderForTheirDurationsAndAreRecordedByName) {
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  const void* gemm = registered("ampere_sgemm_128x64_nn", 3'000'000);
  const void* relu = registered("_Z4reluPfi", 0);
  ASSERT_EQ(simcudaSetKernelDuration(relu, 2'000'000), cudaSuccess);
  void** module = register_scale_module();

  const std::uint64_t before = monotonic_ns();
  ASSERT_EQ(cudaLaunchKernel(gemm, dim3(8, 2), dim3(256), nullptr, 0, stream_), cudaSuccess);
  ASSERT_EQ(cudaLaunchKernel(relu, dim3(4), dim3(128), nullptr, 0, stream_), cudaSuccess);
  float* data = nullptr;
  __cudaPushCallConfiguration(dim3(16), dim3(64), 0, stream_);  // scale<<<16, 64, 0, stream>>>(data, 3)
  scale(data, 3);
  ASSERT_EQ(simcudaBusy(stream_, 1000), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const std::uint64_t after = monotonic_ns();

  auto seen = Client::flushed();
  ASSERT_EQ(seen.size(), 4u);
  const std::vector<std::string> names{"ampere_sgemm_128x64_nn", "_Z4reluPfi", kScaleName, "simcudaBusyKernel"};
  const std::vector<std::uint64_t> durations{3'000'000, 2'000'000, 0, 1'000'000};
  const std::vector<std::int32_t> grids{8, 4, 16, 1}, blocks{256, 128, 64, 1};
  std::set<std::uint32_t> correlations;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(seen[i].kind, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    EXPECT_EQ(seen[i].name, names[i]);
    EXPECT_EQ(seen[i].grid_x, grids[i]);
    EXPECT_EQ(seen[i].block_x, blocks[i]);
    EXPECT_EQ(seen[i].stream, stream_id(stream_));
    EXPECT_EQ(seen[i].device, 0u);
    EXPECT_EQ(seen[i].context, 1u);
    EXPECT_GE(seen[i].end - seen[i].start, durations[i]);  // sleeping never takes less than asked
    if (i > 0) {
      EXPECT_GE(seen[i].start, seen[i - 1].end);  // in stream order, one after the other
    }
    correlations.insert(seen[i].correlation);
  }
  EXPECT_EQ(correlations.size(), 4u);  // one per launching call
  EXPECT_EQ(correlations.count(0), 0u);
  // Without a timestamp callback the records carry CUPTI's own clock, far from the host's.
  EXPECT_GE(seen.front().start, before + 1'000'000'000'000'000'000ull);
  EXPECT_LE(seen.back().end, after + 1'000'000'000'000'000'000ull);
  __cudaUnregisterFatBinary(module);
}

TEST_F(SimCupti, LaunchVariantsAndUnregisteredFunctions) {
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_KERNEL), CUPTI_SUCCESS);
  const void* k = registered("_Z6launchv", 0);
  cudaKernel_t handle = nullptr;
  ASSERT_EQ(cudaGetKernel(&handle, k), cudaSuccess);
  cudaLaunchAttribute cooperative{};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(2);
  config.blockDim = dim3(32);
  config.stream = stream_;
  config.attrs = &cooperative;
  config.numAttrs = 1;
  EXPECT_EQ(cudaLaunchKernel(k, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel_ptsz(k, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(handle, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);  // a cudaKernel_t
  EXPECT_EQ(cudaLaunchKernelExC(&config, k, nullptr), cudaSuccess);
  EXPECT_EQ(cudaLaunchCooperativeKernel(k, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(k, dim3(1), dim3(1), nullptr, 0, nullptr), cudaSuccess);  // the legacy stream
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // Not a registered host stub: the real runtime's error, recorded as the last error.
  int not_a_kernel = 0;
  EXPECT_EQ(cudaLaunchKernel(&not_a_kernel, dim3(1), dim3(1), nullptr, 0, stream_), cudaErrorInvalidDeviceFunction);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDeviceFunction);
  EXPECT_EQ(cudaLaunchKernel(k, dim3(0), dim3(1), nullptr, 0, stream_), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaLaunchKernel(k, dim3(1), dim3(2048), nullptr, 0, stream_), cudaErrorInvalidConfiguration);
  cudaGetLastError();
  // A module's kernels are gone once it is unregistered.
  void** module = register_scale_module();
  __cudaUnregisterFatBinary(module);
  EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&scale), dim3(1), dim3(1), nullptr, 0, stream_),
            cudaErrorInvalidDeviceFunction);
  cudaGetLastError();

  auto seen = Client::flushed();
  ASSERT_EQ(seen.size(), 6u);  // the failed launches ran nothing
  for (const Seen& s : seen) {
    EXPECT_EQ(s.kind, CUPTI_ACTIVITY_KIND_KERNEL);  // only KERNEL is enabled
    EXPECT_EQ(s.name, "_Z6launchv");
  }
  EXPECT_EQ(seen[3].grid_x, 2);
  EXPECT_EQ(seen[3].block_x, 32);
  EXPECT_EQ(seen[5].stream, stream_id(nullptr));
  EXPECT_EQ(stream_id(nullptr), 7u);
  EXPECT_NE(stream_id(stream_), 7u);
}

TEST_F(SimCupti, CopiesAndMemsetsAreRecordedWithBytesDirectionAndMemoryKinds) {
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), CUPTI_SUCCESS);
  void *d = nullptr, *d2 = nullptr, *pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 8192), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d2, 8192), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, 8192), cudaSuccess);
  std::vector<unsigned char> pageable(8192, 1);

  ASSERT_EQ(cudaMemcpyAsync(d, pageable.data(), 4096, cudaMemcpyHostToDevice, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, pinned, 1024, cudaMemcpyHostToDevice, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 2048, cudaMemcpyDefault, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d2, d, 512, cudaMemcpyDeviceToDevice, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0x5a, 300, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpy2DAsync(pageable.data(), 64, d, 128, 32, 4, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(pageable.data(), d, 100, cudaMemcpyDeviceToHost), cudaSuccess);  // the legacy stream
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  auto seen = Client::flushed();
  ASSERT_EQ(seen.size(), 7u);
  struct Want {
    CUpti_ActivityKind kind;
    std::uint64_t bytes;
    std::uint8_t copy_kind, src, dst;
  };
  const std::vector<Want> want{
      {CUPTI_ACTIVITY_KIND_MEMCPY, 4096, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE,
       CUPTI_ACTIVITY_MEMORY_KIND_DEVICE},
      {CUPTI_ACTIVITY_KIND_MEMCPY, 1024, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PINNED,
       CUPTI_ACTIVITY_MEMORY_KIND_DEVICE},
      {CUPTI_ACTIVITY_KIND_MEMCPY, 2048, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
       CUPTI_ACTIVITY_MEMORY_KIND_PINNED},
      {CUPTI_ACTIVITY_KIND_MEMCPY, 512, CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
       CUPTI_ACTIVITY_MEMORY_KIND_DEVICE},
      {CUPTI_ACTIVITY_KIND_MEMSET, 300, 0, 0, 0},
      {CUPTI_ACTIVITY_KIND_MEMCPY, 128, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
       CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE},
      {CUPTI_ACTIVITY_KIND_MEMCPY, 100, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
       CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE},
  };
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(seen[i].kind, want[i].kind);
    EXPECT_EQ(seen[i].bytes, want[i].bytes);
    EXPECT_EQ(seen[i].copy_kind, want[i].copy_kind);
    EXPECT_EQ(seen[i].src_kind, want[i].src);
    EXPECT_EQ(seen[i].dst_kind, want[i].dst);
    EXPECT_EQ(seen[i].stream, i < 6 ? stream_id(stream_) : 7u);
    EXPECT_LE(seen[i].start, seen[i].end);
  }
  EXPECT_EQ(seen[0].flags, CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC);
  EXPECT_EQ(seen[6].flags, 0);  // cudaMemcpy is synchronous
  EXPECT_EQ(seen[4].value, 0x5au);
  EXPECT_EQ(seen[4].memory_kind, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  cudaFree(d);
  cudaFree(d2);
  cudaFreeHost(pinned);
}

namespace {
// A client clock of another unit and origin than CLOCK_MONOTONIC: CUPTI interpolates onto it.
std::uint64_t CUPTIAPI doubled_clock() { return 2 * monotonic_ns() + 12345; }
}  // namespace

TEST_F(SimCupti, TimestampsAreOnTheRegisteredCallbacksClock) {
  ASSERT_EQ(cuptiActivityRegisterTimestampCallback(&doubled_clock), CUPTI_SUCCESS);
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  const void* k = registered("_Z5stampv", 2'000'000);
  std::uint64_t before = 0, after = 0;
  ASSERT_EQ(cuptiGetTimestamp(&before), CUPTI_SUCCESS);
  ASSERT_EQ(cudaLaunchKernel(k, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_EQ(cuptiGetTimestamp(&after), CUPTI_SUCCESS);
  auto seen = Client::flushed();
  ASSERT_EQ(seen.size(), 1u);
  // The interpolation samples both clocks a few ns apart: allow 1 µs of the client's units.
  EXPECT_GE(seen[0].start + 1000, before);
  EXPECT_LE(seen[0].end, after + 1000);
  EXPECT_GE(seen[0].end - seen[0].start + 1000, 2 * 2'000'000u);  // 2 ms in the client's half-ns
}

TEST_F(SimCupti, FullBuffersAreCompletedOnCuptisThreadAndFlushDeliversTheRest) {
  Client::buffer_size = 2 * sizeof(CUpti_ActivityKernel10) + 8;  // room for two records
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  const void* k = registered("_Z4fillv", 0);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(cudaLaunchKernel(k, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  {
    // Two buffers filled up; CUPTI returns them without a flush.
    std::unique_lock lock(Client::mu);
    Client::cv.wait(lock, [] { return Client::completed == 2; });
    EXPECT_EQ(Client::seen.size(), 4u);
    EXPECT_EQ(Client::completing_threads.count(std::this_thread::get_id()), 0u);
  }
  EXPECT_EQ(Client::flushed().size(), 5u);
  EXPECT_EQ(Client::flushed().size(), 5u);  // nothing more to deliver: no buffer comes back
  std::lock_guard lock(Client::mu);
  EXPECT_EQ(Client::records_per_buffer, (std::vector<std::size_t>{2, 2, 1}));
}

TEST_F(SimCupti, RecordsOfDisabledKindsAreAbsent) {
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), CUPTI_SUCCESS);
  const void* k = registered("_Z3offv", 0);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 256), cudaSuccess);
  std::vector<unsigned char> host(256);
  ASSERT_EQ(cudaLaunchKernel(k, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 256, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), d, 64, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY), CUPTI_SUCCESS);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), d, 32, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  auto seen = Client::flushed();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, CUPTI_ACTIVITY_KIND_MEMCPY);
  EXPECT_EQ(seen[0].bytes, 64u);
  // Kinds the simulation makes no records for cannot be enabled.
  EXPECT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), CUPTI_ERROR_NOT_COMPATIBLE);
  EXPECT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_COUNT), CUPTI_ERROR_INVALID_KIND);
  cudaFree(d);
}

std::vector<Seen> of_kind(const std::vector<Seen>& seen, CUpti_ActivityKind kind) {
  std::vector<Seen> out;
  std::copy_if(seen.begin(), seen.end(), std::back_inserter(out), [&](const Seen& s) { return s.kind == kind; });
  return out;
}

// What torch.profiler (Kineto) enables and reads to tie a kernel to its runtime call and to the op
// that launched it.
TEST_F(SimCupti, RuntimeCallsCarryTheirWorksCorrelationAndTheThreadsExternalIds) {
  Client::register_callbacks();
  for (CUpti_ActivityKind kind :
       {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_RUNTIME,
        CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION})
    ASSERT_EQ(cuptiActivityEnable(kind), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnableRuntimeApi(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, 0), CUPTI_SUCCESS);
  const void* k = registered("_Z6linkedv", 0);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 256), cudaSuccess);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 256), cudaSuccess);  // calls cudaHostAlloc: one call all the same

  ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 7), CUPTI_SUCCESS);
  ASSERT_EQ(cudaLaunchKernel(k, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);
  ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, 100), CUPTI_SUCCESS);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, 64, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  std::uint64_t last = 0;
  EXPECT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, &last), CUPTI_SUCCESS);
  EXPECT_EQ(last, 100u);
  EXPECT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last), CUPTI_SUCCESS);
  EXPECT_EQ(last, 7u);
  EXPECT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
            CUPTI_ERROR_QUEUE_EMPTY);
  EXPECT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_INVALID, 1),
            CUPTI_ERROR_INVALID_PARAMETER);

  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto unknown = reinterpret_cast<cudaStream_t>(0x7e57);
  ASSERT_EQ(cudaStreamSynchronize(unknown), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  const auto seen = Client::flushed();

  const auto calls = of_kind(seen, CUPTI_ACTIVITY_KIND_RUNTIME);
  std::vector<std::uint32_t> cbids;
  for (const Seen& c : calls) cbids.push_back(c.cbid);
  // cudaMalloc turned off, cudaHostAlloc inside cudaMallocHost, cudaGetLastError not a traced call.
  EXPECT_EQ(
      cbids,
      (std::vector<std::uint32_t>{
          CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
          CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
          CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
          CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020}));
  ASSERT_EQ(calls.size(), 8u);
  const pthread_t self = pthread_self();
  std::uint32_t low_bits = 0;
  std::memcpy(&low_bits, &self, sizeof(low_bits));
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].process, static_cast<std::uint32_t>(getpid()));
    EXPECT_EQ(calls[i].thread, low_bits);
    EXPECT_LE(calls[i].start, calls[i].end);
    if (i == 0) continue;
    EXPECT_LE(calls[i - 1].end, calls[i].start);
    EXPECT_GT(calls[i].correlation, calls[i - 1].correlation);
  }
  EXPECT_EQ(calls[5].result, static_cast<std::uint32_t>(cudaErrorInvalidResourceHandle));
  const std::uint32_t launch = calls[1].correlation, copy = calls[2].correlation;

  const auto kernels = of_kind(seen, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].correlation, launch);
  const auto copies = of_kind(seen, CUPTI_ACTIVITY_KIND_MEMCPY);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].correlation, copy);

  // The innermost id of each kind the thread had pushed, for the calls made under it only.
  const auto external = of_kind(seen, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  std::set<std::tuple<std::uint32_t, std::uint64_t, std::uint32_t>> links;
  for (const Seen& x : external) links.emplace(x.external_kind, x.external_id, x.correlation);
  EXPECT_EQ(external.size(), 3u);
  EXPECT_EQ(links, (std::set<std::tuple<std::uint32_t, std::uint64_t, std::uint32_t>>{
                       {CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 7, launch},
                       {CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 7, copy},
                       {CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, 100, copy}}));
  // Each before the records of the work its call launched, as a client reading in order needs them.
  auto first_index = [&](CUpti_ActivityKind kind, std::uint32_t correlation) {
    return std::find_if(seen.begin(), seen.end(),
                        [&](const Seen& r) { return r.kind == kind && r.correlation == correlation; }) -
           seen.begin();
  };
  EXPECT_LT(first_index(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, launch),
            first_index(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, launch));
  EXPECT_LT(first_index(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, copy), first_index(CUPTI_ACTIVITY_KIND_MEMCPY, copy));

  // The stream's and the device's synchronisations; the failed one makes none (CUPTI's default).
  const auto syncs = of_kind(seen, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_EQ(syncs[0].sync_type, static_cast<std::uint32_t>(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE));
  EXPECT_EQ(syncs[0].correlation, calls[3].correlation);
  EXPECT_EQ(syncs[0].stream, stream_id(stream_));
  EXPECT_EQ(syncs[0].context, 1u);
  EXPECT_EQ(syncs[0].event, CUPTI_SYNCHRONIZATION_INVALID_VALUE);
  EXPECT_EQ(syncs[0].start, calls[3].start);
  EXPECT_EQ(syncs[1].sync_type, static_cast<std::uint32_t>(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE));
  EXPECT_EQ(syncs[1].correlation, calls[4].correlation);
  EXPECT_EQ(syncs[1].stream, CUPTI_SYNCHRONIZATION_INVALID_VALUE);
}

// cuptiActivityEnableRuntimeApi alone records the calls it names; an event synchronisation names
// its event.
TEST_F(SimCupti, OneRuntimeCallCanBeTracedAlone) {
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnableRuntimeApi(CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020, 1), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION), CUPTI_SUCCESS);
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreate(&event), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream_), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(event), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const auto seen = Client::flushed();
  const auto calls = of_kind(seen, CUPTI_ACTIVITY_KIND_RUNTIME);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].cbid, static_cast<std::uint32_t>(CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020));
  const auto syncs = of_kind(seen, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_EQ(syncs[0].sync_type, static_cast<std::uint32_t>(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE));
  EXPECT_EQ(syncs[0].correlation, calls[0].correlation);
  EXPECT_NE(syncs[0].event, CUPTI_SYNCHRONIZATION_INVALID_VALUE);
  EXPECT_EQ(syncs[1].sync_type, static_cast<std::uint32_t>(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE));
  cudaEventDestroy(event);
}

TEST_F(SimCupti, RecordsWithoutABufferAreDroppedAndCounted) {
  Client::decline = true;
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  const void* k = registered("_Z4dropv", 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaLaunchKernel(k, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_TRUE(Client::flushed().empty());
  std::size_t dropped = 0;
  ASSERT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), CUPTI_SUCCESS);
  EXPECT_EQ(dropped, 3u);
  ASSERT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), CUPTI_SUCCESS);
  EXPECT_EQ(dropped, 0u);  // reset by the call
}

TEST_F(SimCupti, GraphLaunchesRecordTheKernelsTheyReplay) {
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), CUPTI_SUCCESS);
  const void* a = registered("_Z6graphAv", 0);
  const void* b = registered("_Z6graphBv", 0);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaLaunchKernel(a, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 1, 64, stream_), cudaSuccess);
  ASSERT_EQ(cudaLaunchKernel(b, dim3(1), dim3(1), nullptr, 0, stream_), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_TRUE(Client::flushed().empty());  // capturing runs nothing
  ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch_ptsz(exec, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  auto seen = Client::flushed();
  ASSERT_EQ(seen.size(), 6u);
  const std::vector<std::string> names{"_Z6graphAv", "", "_Z6graphBv", "_Z6graphAv", "", "_Z6graphBv"};
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i].name, names[i]) << i;
  EXPECT_EQ(seen[1].kind, CUPTI_ACTIVITY_KIND_MEMSET);
  // Each launch's nodes carry that cudaGraphLaunch's correlation id.
  EXPECT_EQ(seen[0].correlation, seen[2].correlation);
  EXPECT_EQ(seen[1].correlation, seen[2].correlation);
  EXPECT_EQ(seen[3].correlation, seen[5].correlation);
  EXPECT_NE(seen[0].correlation, seen[3].correlation);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(d);
}

TEST_F(SimCupti, OneSubscriberAtATime) {
  CUpti_SubscriberHandle first = nullptr, second = nullptr;
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.subscriberName = "trainshim";
  ASSERT_EQ(cuptiSubscribe_v2(&first, nullptr, nullptr, &params), CUPTI_SUCCESS);
  EXPECT_EQ(cuptiEnableDomain(1, first, CUPTI_CB_DOMAIN_RUNTIME_API), CUPTI_SUCCESS);
  char old[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = {};
  CUpti_SubscriberParams again{};
  again.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  again.oldSubscriberName = old;
  again.oldSubscriberSize = sizeof(old);
  EXPECT_EQ(cuptiSubscribe_v2(&second, nullptr, nullptr, &again), CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  EXPECT_STREQ(old, "CUPTI for trainshim");
  EXPECT_EQ(cuptiSubscribe(&second, nullptr, nullptr), CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  const char* text = nullptr;
  ASSERT_EQ(cuptiGetResultString(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, &text), CUPTI_SUCCESS);
  EXPECT_STREQ(text, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED");
  ASSERT_EQ(cuptiUnsubscribe(first), CUPTI_SUCCESS);
  EXPECT_EQ(cuptiEnableDomain(1, first, CUPTI_CB_DOMAIN_RUNTIME_API), CUPTI_ERROR_INVALID_PARAMETER);
  ASSERT_EQ(cuptiSubscribe(&second, nullptr, nullptr), CUPTI_SUCCESS);  // free again
  std::uint32_t version = 0;
  ASSERT_EQ(cuptiGetVersion(&version), CUPTI_SUCCESS);
  EXPECT_EQ(version, static_cast<std::uint32_t>(CUPTI_API_VERSION));
}

TEST_F(SimCupti, ToolHoldingCuptiRefusesTheFirstSubscriber) {
  ASSERT_EQ(setenv("SIMCUDA_CUPTI_HELD", "1", 1), 0);
  CUpti_SubscriberHandle subscriber = nullptr;
  char old[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = {};
  CUpti_SubscriberParams params{};
  params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
  params.oldSubscriberName = old;
  params.oldSubscriberSize = sizeof(old);
  EXPECT_EQ(cuptiSubscribe(&subscriber, nullptr, nullptr), CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  EXPECT_EQ(cuptiSubscribe_v2(&subscriber, nullptr, nullptr, &params), CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
  EXPECT_STREQ(old, "Nsight Systems");
  ASSERT_EQ(unsetenv("SIMCUDA_CUPTI_HELD"), 0);
  EXPECT_EQ(cuptiSubscribe(&subscriber, nullptr, nullptr), CUPTI_SUCCESS);
}

TEST(SimAbi, CuptiSymbolsCarryTheRealVersion) {
  std::string out = run(std::string("objdump -T ") + SIMCUPTI_PATH);
  for (const char* sym : {"cuptiSubscribe", "cuptiActivityEnable", "cuptiActivityRegisterCallbacks",
                          "cuptiActivityFlushAll", "cuptiActivityGetNextRecord", "cuptiFinalize"})
    EXPECT_NE(out.find(std::string("libcupti.so.13 ") + sym + "\n"), std::string::npos) << sym;
  std::string dyn = run(std::string("objdump -p ") + SIMCUPTI_PATH);
  EXPECT_NE(dyn.find("SONAME               libcupti.so.13"), std::string::npos) << dyn;
  // libcupti is optional: the runtime does not load it.
  EXPECT_EQ(run(std::string("objdump -p ") + SIMCUDART_PATH).find("libcupti"), std::string::npos);
}

TEST_F(SimCupti, CollectivesAreKernelsNamedAsNcclsOwn) {
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  std::array<ncclComm_t, 2> comms{};
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  std::array<cudaStream_t, 2> streams{};
  std::array<float*, 2> bufs{};
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&bufs[r]), 64 * sizeof(float)), cudaSuccess);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(ncclAllReduce(bufs[r], bufs[r], 64, ncclFloat32, ncclSum, comms[r], streams[r]), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(ncclAllReduce(bufs[r], bufs[r], 64, ncclFloat32, ncclMax, comms[r], streams[r]), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaStreamSynchronize(streams[r]), cudaSuccess);
  auto seen = Client::flushed();
  ASSERT_EQ(seen.size(), 4u);
  std::map<std::uint32_t, std::vector<std::string>> names_by_stream;
  for (const Seen& s : seen) names_by_stream[s.stream].push_back(s.name);
  const std::vector<std::string> want{"_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
                                      "_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE"};
  for (int r = 0; r < 2; ++r) EXPECT_EQ(names_by_stream[stream_id(streams[r])], want) << r;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
    cudaFree(bufs[r]);
    cudaStreamDestroy(streams[r]);
  }
}

TEST_F(SimCupti, EachLaunchingThreadFillsABufferOfItsOwnUnlessTheClientAsksForOne) {
  std::uint8_t per_thread = 0;
  std::size_t size = sizeof(per_thread);
  ASSERT_EQ(cuptiActivityGetAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, &size, &per_thread),
            CUPTI_SUCCESS);
  EXPECT_EQ(per_thread, 1);  // CUPTI 13's default
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  const void* a = registered("_Z7threadAv", 0);
  const void* b = registered("_Z7threadBv", 0);
  auto launch_twice = [](const void* k) {
    cudaStream_t s;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(cudaLaunchKernel(k, dim3(1), dim3(1), nullptr, 0, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaStreamDestroy(s);
  };
  std::thread(launch_twice, a).join();
  std::thread(launch_twice, b).join();
  EXPECT_EQ(Client::flushed().size(), 4u);
  {
    std::lock_guard lock(Client::mu);
    EXPECT_EQ(Client::records_per_buffer, (std::vector<std::size_t>{2, 2}));
    for (const auto& names : Client::names_per_buffer) EXPECT_EQ(names.size(), 1u);  // one thread's kernels
  }
  ASSERT_EQ(cuptiFinalize(), CUPTI_SUCCESS);

  // One global buffer, as before CUDA 12.3, when the client sets the attribute to 0 first.
  Client::reset();
  per_thread = 0;
  ASSERT_EQ(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, &size, &per_thread),
            CUPTI_SUCCESS);
  Client::register_callbacks();
  ASSERT_EQ(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
  std::thread(launch_twice, a).join();
  std::thread(launch_twice, b).join();
  EXPECT_EQ(Client::flushed().size(), 4u);
  std::lock_guard lock(Client::mu);
  EXPECT_EQ(Client::records_per_buffer, (std::vector<std::size_t>{4}));
}
