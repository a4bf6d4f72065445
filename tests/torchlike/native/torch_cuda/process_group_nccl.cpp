// Mirrors torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, NCCLUtils.cpp and the NCCL part of
// torch/csrc/cuda/nccl.cpp: how PyTorch creates communicators (ncclCommInitRankConfig, blocking or
// not; ncclCommInitRankScalable above TORCH_NCCL_RANKS_PER_ROOT ranks; ncclCommSplit for
// new_group), how it enqueues a collective (without a group), point-to-point calls (a group around
// a coalesced batch, on the collective communicator) and all_to_all (a group of send/recv), and
// how dist.barrier() waits (WorkNCCL::wait -> the current stream's synchronize()).
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "torchlike/c10_cuda.h"
#include "torchlike/c10d.h"

// NCCL >= 2.23 only. Resolved weakly, so that a libnccl without it fails this one path with an
// error instead of failing to load (real torch decides at build time: NCCL_HAS_INIT_RANK_SCALABLE).
#pragma weak ncclCommInitRankScalable

namespace c10d {
namespace {

constexpr int kCommInitBusyWaitMillis = 10;
// ProcessGroupNCCL.hpp coalescing_state_ bits.
constexpr int CoalActive = 0x01, CoalColl = 0x02, CoalP2P = 0x04;

void check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) throw c10::Error(std::string("NCCL error in ") + what + ": " + ncclGetErrorString(result));
}

// C10D_NCCL_CHECK_NONBLOCKING: ncclInProgress is not an error for a non-blocking communicator.
void checkNonblocking(ncclResult_t result, const char* what) {
  if (result != ncclInProgress) check(result, what);
}

// C10D_NCCL_CHECK_TIMEOUT(_SLEEP): poll the communicator while it answers ncclInProgress.
void checkTimeout(ncclResult_t result, ncclComm_t comm, const char* what, bool sleep) {
  while (result == ncclInProgress) {
    if (sleep) std::this_thread::sleep_for(std::chrono::milliseconds(kCommInitBusyWaitMillis));
    else sched_yield();
    check(ncclCommGetAsyncError(comm, &result), "ncclCommGetAsyncError");
  }
  check(result, what);
}

bool envFlag(const char* name) {
  const char* value = std::getenv(name);
  return value && (std::strcmp(value, "1") == 0 || std::strcmp(value, "true") == 0 || std::strcmp(value, "y") == 0);
}

int envInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::atoi(value) : fallback;
}

// NCCLUtils.cpp nccl_use_nonblocking: TORCH_NCCL_USE_COMM_NONBLOCKING.
bool nccl_use_nonblocking() {
  static const bool value = envFlag("TORCH_NCCL_USE_COMM_NONBLOCKING");
  return value;
}

ncclDataType_t getNcclDataType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kLong:
      return ncclInt64;
    case at::kInt:
      return ncclInt32;
    case at::kBool:
      return ncclUint8;
  }
  throw c10::Error("Unsupported data type for NCCL process group");
}

ncclRedOp_t getNcclReduceOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
      return ncclSum;
    case ReduceOp::AVG:
      return ncclAvg;
    case ReduceOp::PRODUCT:
      return ncclProd;
    case ReduceOp::MIN:
      return ncclMin;
    case ReduceOp::MAX:
      return ncclMax;
  }
  throw c10::Error("Unsupported ReduceOp for NCCL process group");
}

int currentDevice() {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// at::cuda::OptionalCUDAGuard: the device for the scope, restored after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : previous_(currentDevice()) {
    if (device >= 0 && device != previous_) C10_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// The stand-in's tensors carry no device index: a CUDA tensor is on the current device, which
// is where the scripts (torch.cuda.set_device(rank)) put it.
int getDevice(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.is_cuda(), "Tensors must be CUDA and dense");
  return currentDevice();
}

// ProcessGroupNCCL.cpp getKeyFromDevice / getKeySendRecv.
std::string getKeyFromDevice(int device) { return std::to_string(device); }
std::string getKeySendRecv(int myRank, int peer) {
  const int lowRank = myRank < peer ? myRank : peer;
  const int highRank = myRank < peer ? peer : myRank;
  return std::to_string(lowRank) + ":" + std::to_string(highRank);
}

std::vector<uint8_t> idBytes(const ncclUniqueId& id) {
  const auto* p = reinterpret_cast<const uint8_t*>(&id);
  return {p, p + NCCL_UNIQUE_ID_BYTES};
}
void idFromBytes(const std::vector<uint8_t>& bytes, ncclUniqueId* id) {
  TORCH_CHECK(bytes.size() == NCCL_UNIQUE_ID_BYTES, "Invalid size for ncclUniqueId");
  std::memcpy(id, bytes.data(), NCCL_UNIQUE_ID_BYTES);
}

}  // namespace

// ---- NCCLComm (NCCLUtils.cpp) ----

NCCLComm::~NCCLComm() {
  // ~NCCLComm: a communicator that was not aborted is destroyed; never both.
  if (ncclComm_ && !aborted_) (void)ncclCommDestroy(ncclComm_);
}

// NCCLComm::create: ncclCommInitRankConfig; a non-blocking one is ready once ncclCommGetAsyncError says so
// (getNcclComm).
TORCHLIKE_FRAME std::shared_ptr<NCCLComm> NCCLComm::create(int numRanks, int rank, ncclUniqueId commId, int deviceIndex,
                                                           ncclConfig_t& config) {
  DeviceGuard guard(deviceIndex);
  auto comm = std::make_shared<NCCLComm>();
  comm->nonBlocking_ = config.blocking == 0;
  checkNonblocking(ncclCommInitRankConfig(&comm->ncclComm_, numRanks, commId, rank, &config), "ncclCommInitRankConfig");
  comm->rank_ = rank;
  comm->deviceIndex_ = deviceIndex;
  comm->initialized_ = !comm->nonBlocking_;
  return comm;
}

// NCCLComm::create_scalable: ncclCommInitRankScalable with one unique id per root.
TORCHLIKE_FRAME std::shared_ptr<NCCLComm> NCCLComm::create_scalable(int numRanks, int rank,
                                                                    std::vector<ncclUniqueId>& commIds, int deviceIndex,
                                                                    ncclConfig_t& config) {
  DeviceGuard guard(deviceIndex);
  auto comm = std::make_shared<NCCLComm>();
  comm->nonBlocking_ = config.blocking == 0;
  if (!ncclCommInitRankScalable)
    throw c10::Error("NCCL error in ncclCommInitRankScalable: not provided by this libnccl (NCCL >= 2.23 needed)");
  checkNonblocking(ncclCommInitRankScalable(&comm->ncclComm_, numRanks, rank, static_cast<int>(commIds.size()),
                                            commIds.data(), &config),
                   "ncclCommInitRankScalable");
  comm->rank_ = rank;
  comm->deviceIndex_ = deviceIndex;
  comm->initialized_ = !comm->nonBlocking_;
  return comm;
}

// NCCLComm::split: ncclCommSplit on the parent (NCCL_SPLIT_NOCOLOR for ranks outside the new
// group); in non-blocking mode, wait for the parent to leave ncclInProgress (NCCL fills the
// child's handle only then, NVIDIA/nccl#1472).
TORCHLIKE_FRAME std::shared_ptr<NCCLComm> NCCLComm::split(NCCLComm* source, int color_id, int rank,
                                                          ncclConfig_t& config) {
  TORCH_CHECK(color_id >= NCCL_SPLIT_NOCOLOR, "Color must be a non-negative value or NCCL_SPLIT_NOCOLOR (-1)");
  DeviceGuard guard(source->deviceIndex_);
  auto comm = std::make_shared<NCCLComm>();
  ncclComm_t sourceComm = source->getNcclComm();
  if (config.blocking == 0)
    checkTimeout(ncclCommSplit(sourceComm, color_id, rank, &comm->ncclComm_, &config), sourceComm, "ncclCommSplit",
                 true);
  else check(ncclCommSplit(sourceComm, color_id, rank, &comm->ncclComm_, &config), "ncclCommSplit");
  ++source->ncclCommSplitCounter_;
  comm->rank_ = rank;
  comm->deviceIndex_ = source->deviceIndex_;
  comm->nonBlocking_ = config.blocking == 0;
  comm->initialized_ = !comm->nonBlocking_;
  return comm;
}

// NCCLComm::getNcclComm -> waitUntilInitialized: in non-blocking mode, polls
// ncclCommGetAsyncError until the communicator leaves ncclInProgress.
TORCHLIKE_FRAME ncclComm_t NCCLComm::getNcclComm() {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!aborted_, "NCCL communicator was aborted on rank " + std::to_string(rank_) + ".");
  while (!initialized_ && nccl_use_nonblocking()) {
    if (ncclComm_) {
      ncclResult_t result = ncclInProgress;
      check(ncclCommGetAsyncError(ncclComm_, &result), "ncclCommGetAsyncError");
      if (result == ncclSuccess) {
        initialized_ = true;
        break;
      }
      check(result == ncclInProgress ? ncclSuccess : result, "non-blocking communicator initialization");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kCommInitBusyWaitMillis));
  }
  return ncclComm_;
}

void NCCLComm::abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_ || !ncclComm_) return;
  (void)ncclCommAbort(ncclComm_);
  aborted_ = true;
}

// ---- WorkNCCL ----

ProcessGroupNCCL::WorkNCCL::WorkNCCL(int device, OpType opType, bool isP2P)
    : device_(device),
      opType_(opType),
      isP2P_(isP2P),
      ncclStartEvent_(std::make_shared<at::cuda::CUDAEvent>()),
      ncclEndEvent_(std::make_shared<at::cuda::CUDAEvent>()) {}

// WorkNCCL::isCompleted -> finishedGPUExecutionInternal: a query of the end event.
TORCHLIKE_FRAME bool ProcessGroupNCCL::WorkNCCL::isCompleted() { return ncclEndEvent_->query(); }

// WorkNCCL::synchronizeStream: the current stream waits for the end event (no host wait).
TORCHLIKE_FRAME void ProcessGroupNCCL::WorkNCCL::synchronizeStream() {
  auto currentStream = c10::cuda::getCurrentCUDAStream(device_);
  ncclEndEvent_->block(currentStream);
}

TORCHLIKE_FRAME void ProcessGroupNCCL::WorkNCCL::synchronize() { synchronizeStream(); }

// WorkNCCL::wait: the stream-side wait, then, for a barrier that has not finished yet, the host
// blocks on the current stream (currentStream.synchronize(): cudaStreamSynchronize).
TORCHLIKE_FRAME bool ProcessGroupNCCL::WorkNCCL::wait(std::chrono::milliseconds timeout) {
  synchronize();
  if (blockingWait_ || timeout != kNoTimeout) {
    const auto start = std::chrono::steady_clock::now();
    while (!isCompleted()) {
      TORCH_CHECK(timeout == kNoTimeout || std::chrono::steady_clock::now() - start < timeout,
                  "Work timed out in blocking wait.");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } else if (isBarrierOp_ && !isCompleted()) {
    auto currentStream = c10::cuda::getCurrentCUDAStream(device_);
    currentStream.synchronize();
  }
  return true;
}

// ---- ProcessGroupNCCL ----

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, Options options)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      options_(options),
      blockingWait_(envFlag("TORCH_NCCL_BLOCKING_WAIT")) {}

ProcessGroupNCCL::~ProcessGroupNCCL() { shutdown(); }

// ProcessGroupNCCL::shutdown -> abort: every communicator of the group is aborted.
void ProcessGroupNCCL::shutdown() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [key, comm] : devNCCLCommMap_) comm->abort();
  devNCCLCommMap_.clear();
}

bool ProcessGroupNCCL::useNonblocking() const { return nccl_use_nonblocking(); }

// guessDeviceForRank: the bound device, else one already used, else rank % device count.
int ProcessGroupNCCL::guessDeviceForRank() const {
  if (boundDevice_ >= 0) return boundDevice_;
  if (!usedDeviceIdxs_.empty()) return usedDeviceIdxs_.front();
  int count = 1;
  C10_CUDA_CHECK(cudaGetDeviceCount(&count));
  return rank_ % std::max(count, 1);
}

void ProcessGroupNCCL::groupStart() {
  check(ncclGroupStart(), "ncclGroupStart");
  ++ncclActiveGroupCounter_;
}

void ProcessGroupNCCL::groupEnd() {
  check(ncclGroupEnd(), "ncclGroupEnd");
  --ncclActiveGroupCounter_;
}

// groupEndNonblocking: C10D_NCCL_CHECK_TIMEOUT_GROUPEND, the launch may finish on NCCL's thread.
void ProcessGroupNCCL::groupEndNonblocking(const std::shared_ptr<NCCLComm>& comm) {
  checkTimeout(ncclGroupEnd(), comm->getNcclComm(), "ncclGroupEnd", false);
  --ncclActiveGroupCounter_;
}

// broadcastUniqueNCCLID: rank 0 (or the lower rank of a p2p pair) writes the id, the others
// read it; the key counts the communicators this group created.
void ProcessGroupNCCL::broadcastUniqueNCCLID(ncclUniqueId* ncclID, bool isSingleP2POp, const std::string& p2pKey,
                                             int p2pRank) {
  const std::string storeKey = isSingleP2POp ? p2pKey : std::to_string(ncclCommCounter_++);
  if (rank_ == 0 || (isSingleP2POp && p2pRank == 0)) store_->set(storeKey, idBytes(*ncclID));
  else idFromBytes(store_->get(storeKey), ncclID);
}

// allgatherUniqueNCCLIDs: each root publishes its id; every rank reads all of them.
void ProcessGroupNCCL::allgatherUniqueNCCLIDs(int rootIdx, ncclUniqueId* ncclID, std::vector<ncclUniqueId>& ncclIDs) {
  const std::string storeKeyPrefix = std::to_string(ncclCommCounter_++) + ":";
  if (rootIdx >= 0) store_->set(storeKeyPrefix + std::to_string(rootIdx), idBytes(*ncclID));
  for (std::size_t r = 0; r < ncclIDs.size(); ++r)
    idFromBytes(store_->get(storeKeyPrefix + std::to_string(r)), &ncclIDs[r]);
}

std::shared_ptr<NCCLComm> ProcessGroupNCCL::getNCCLComm(const std::string& deviceKey) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = devNCCLCommMap_.find(deviceKey);
  return it == devNCCLCommMap_.end() ? nullptr : it->second;
}

// initNCCLComm: split from the parent group where one is given (eager init), else
// ncclCommInitRankScalable above TORCH_NCCL_RANKS_PER_ROOT ranks, else ncclCommInitRankConfig
// with the id broadcast through the store. Active groups are closed around the creation.
TORCHLIKE_FRAME std::shared_ptr<NCCLComm> ProcessGroupNCCL::initNCCLComm(const std::string& deviceKey, int device,
                                                                         OpType opType, int p2pRank,
                                                                         bool isSendRecvSelf) {
  const bool batchP2P = ncclActiveGroupCounter_ > 0;
  const bool singleP2POp = (opType == OpType::SEND || opType == OpType::RECV) && !batchP2P;
  DeviceGuard guard(device);
  usedDeviceIdxs_.push_back(device);
  if (useNonblocking()) options_.config.blocking = 0;

  // [Group Start/End Note]: a communicator cannot be created inside an open group.
  for (int i = 0; i < ncclActiveGroupCounter_; ++i) check(ncclGroupEnd(), "ncclGroupEnd");

  std::shared_ptr<NCCLComm> ncclComm;
  if (options_.split_from) {
    auto parent = options_.split_from->getNCCLComm(getKeyFromDevice(device));
    if (parent && !parent->isAborted())
      ncclComm = NCCLComm::split(parent.get(), options_.split_color, rank_, options_.config);
  }
  if (!ncclComm) {
    const int numRanks = isSendRecvSelf ? 1 : (singleP2POp ? 2 : size_);
    const int rank = isSendRecvSelf ? 0 : (singleP2POp ? p2pRank : rank_);
    const int ranksPerRoot = envInt("TORCH_NCCL_RANKS_PER_ROOT", 128);
    const bool useScalableInit = !singleP2POp && size_ > ranksPerRoot;
    if (useScalableInit) {
      const int numRoots = (size_ + ranksPerRoot - 1) / ranksPerRoot;
      std::vector<ncclUniqueId> ncclIDs(static_cast<std::size_t>(numRoots));
      int rootIdx = -1;
      ncclUniqueId ncclID{};
      if (rank_ % ranksPerRoot == 0) {
        rootIdx = rank_ / ranksPerRoot;
        check(ncclGetUniqueId(&ncclID), "ncclGetUniqueId");
      }
      allgatherUniqueNCCLIDs(rootIdx, &ncclID, ncclIDs);
      ncclComm = NCCLComm::create_scalable(numRanks, rank, ncclIDs, device, options_.config);
    } else {
      ncclUniqueId ncclID{};
      if (rank_ == 0 || (singleP2POp && p2pRank == 0)) check(ncclGetUniqueId(&ncclID), "ncclGetUniqueId");
      broadcastUniqueNCCLID(&ncclID, singleP2POp, deviceKey, p2pRank);
      ncclComm = NCCLComm::create(numRanks, rank, ncclID, device, options_.config);
    }
  }

  for (int i = 0; i < ncclActiveGroupCounter_; ++i) check(ncclGroupStart(), "ncclGroupStart");

  std::lock_guard<std::mutex> lock(mutex_);
  ncclStreams_.emplace(deviceKey, c10::cuda::getStreamFromPool(options_.is_high_priority_stream, device));
  ncclEvents_.try_emplace(deviceKey);
  devNCCLCommMap_.emplace(deviceKey, ncclComm);
  return ncclComm;
}

// eagerConnectSingleDevice: init_process_group(device_id=...) creates the communicator now.
TORCHLIKE_FRAME void ProcessGroupNCCL::eagerConnectSingleDevice(int device) {
  boundDevice_ = device;
  initNCCLComm(getKeyFromDevice(device), device, OpType::ALLREDUCE);
}

// performNocolorSplit: a rank outside a new group still takes part in the parent's split.
TORCHLIKE_FRAME void ProcessGroupNCCL::performNocolorSplit(int device) {
  options_.config.blocking = useNonblocking() ? 0 : 1;
  auto comm = getNCCLComm(getKeyFromDevice(device));
  TORCH_CHECK(comm, "No parent communicator exists for nocolor split");
  NCCLComm::split(comm.get(), NCCL_SPLIT_NOCOLOR, rank_, options_.config);
}

// collective(): the operation runs on the current stream when the caller waits for it
// (async_op=False), else on the group's NCCL stream after it waited for the current one; fn
// is called WITHOUT a group around it.
template <typename Fn>
TORCHLIKE_FRAME std::shared_ptr<ProcessGroupNCCL::WorkNCCL> ProcessGroupNCCL::collective(at::Tensor& input,
                                                                                         at::Tensor& output, Fn fn,
                                                                                         OpType opType, bool asyncOp) {
  const int device = getDevice(input);
  const std::string key = getKeyFromDevice(device);
  std::shared_ptr<NCCLComm> ncclComm = getNCCLComm(key);
  if (!ncclComm) ncclComm = initNCCLComm(key, device, opType);
  if (coalescing_state_ & CoalActive) {
    coalescing_state_ |= CoalColl;
    coalescedDevice_ = device;
    coalescedComm_ = ncclComm;
  }
  c10::cuda::CUDAStream ncclStream = asyncOp ? ncclStreams_.at(key) : c10::cuda::getCurrentCUDAStream(device);
  if (asyncOp) {
    // syncStream: the NCCL stream waits for the inputs' producers on the current stream.
    auto& event = ncclEvents_.at(key);
    event.record(c10::cuda::getCurrentCUDAStream(device));
    event.block(ncclStream);
  }
  auto work = std::make_shared<WorkNCCL>(device, opType, false);
  work->blockingWait_ = blockingWait_;
  work->ncclStartEvent_->record(ncclStream);
  ncclComm_t comm = ncclComm->getNcclComm();
  if (asyncOp) c10::cuda::CUDACachingAllocator::recordStream(output.data_ptr(), ncclStream);
  // C10D_NCCL_CHECK_TIMEOUT: on a non-blocking communicator the call may answer ncclInProgress.
  checkTimeout(fn(input, output, comm, ncclStream), comm, "collective", false);
  work->ncclEndEvent_->record(ncclStream);
  work->ncclComm_ = ncclComm;
  work->stashed_ = {input, output};
  return work;
}

// pointToPoint(): inside a coalescing group (batch_isend_irecv) the collective communicator is
// used, as for a collective; a single send/recv gets a 2-rank communicator of its own.
template <typename Fn>
TORCHLIKE_FRAME std::shared_ptr<ProcessGroupNCCL::WorkNCCL> ProcessGroupNCCL::pointToPoint(at::Tensor& tensor, Fn fn,
                                                                                           int peer, OpType opType) {
  const int device = getDevice(tensor);
  DeviceGuard guard(device);
  std::string key;
  int p2pRank = 0, p2pTargetRank = 0;
  bool isSendRecvSelf = false;
  const bool batchP2P = ncclActiveGroupCounter_ > 0;
  if (batchP2P) {
    key = getKeyFromDevice(device);
    p2pRank = rank_;
    p2pTargetRank = peer;
  } else {
    key = getKeySendRecv(rank_, peer);
    p2pRank = rank_ <= peer ? 0 : 1;
    isSendRecvSelf = rank_ == peer;
    p2pTargetRank = isSendRecvSelf ? 0 : 1 - p2pRank;
  }
  std::shared_ptr<NCCLComm> ncclComm = getNCCLComm(key);
  if (!ncclComm) ncclComm = initNCCLComm(key, device, opType, p2pRank, isSendRecvSelf);
  if (coalescing_state_ & CoalActive) {
    coalescing_state_ |= CoalP2P;
    coalescedDevice_ = device;
    coalescedComm_ = ncclComm;
  }
  c10::cuda::CUDAStream ncclStream = ncclStreams_.at(key);
  auto& event = ncclEvents_.at(key);
  event.record(c10::cuda::getCurrentCUDAStream(device));
  event.block(ncclStream);

  std::shared_ptr<WorkNCCL> work;
  if (!coalescing_state_) {
    work = std::make_shared<WorkNCCL>(device, opType, true);
    work->blockingWait_ = blockingWait_;
    work->ncclStartEvent_->record(ncclStream);
  }
  c10::cuda::CUDACachingAllocator::recordStream(tensor.data_ptr(), ncclStream);
  ncclComm_t comm = ncclComm->getNcclComm();
  checkTimeout(fn(tensor, comm, ncclStream, p2pTargetRank), comm, opType == OpType::SEND ? "ncclSend" : "ncclRecv",
               false);
  if (!coalescing_state_) {
    work->ncclEndEvent_->record(ncclStream);
    work->ncclComm_ = ncclComm;
    work->stashed_ = {tensor};
  }
  return work;
}

TORCHLIKE_FRAME std::shared_ptr<ProcessGroupNCCL::WorkNCCL> ProcessGroupNCCL::allreduce_impl(at::Tensor& tensor,
                                                                                             ReduceOp op,
                                                                                             bool asyncOp) {
  return collective(
      tensor, tensor,
      [op](at::Tensor& input, at::Tensor& output, ncclComm_t comm, c10::cuda::CUDAStream& stream) {
        return ncclAllReduce(input.data_ptr(), output.data_ptr(), static_cast<std::size_t>(input.numel()),
                             getNcclDataType(input.scalar_type()), getNcclReduceOp(op), comm, stream.stream());
      },
      OpType::ALLREDUCE, asyncOp);
}

TORCHLIKE_FRAME std::shared_ptr<ProcessGroupNCCL::WorkNCCL> ProcessGroupNCCL::allreduce(at::Tensor& tensor, ReduceOp op,
                                                                                        bool asyncOp) {
  return allreduce_impl(tensor, op, asyncOp);
}

// barrier(): an all-reduce of a one-element tensor on the guessed device; its wait() blocks
// the host (isBarrierOp_).
TORCHLIKE_FRAME std::shared_ptr<ProcessGroupNCCL::WorkNCCL> ProcessGroupNCCL::barrier(int device) {
  const int barDevice = device >= 0 ? device : guessDeviceForRank();
  DeviceGuard guard(barDevice);
  at::Tensor barrierTensor = at::_ops::empty_memory_format::call({1}, at::kFloat, at::kCUDA, false);
  at::_ops::fill__Scalar::call(barrierTensor, at::Scalar{0.0, at::kDouble});
  auto work = allreduce_impl(barrierTensor, ReduceOp::SUM, true);
  work->isBarrierOp_ = true;
  return work;
}

TORCHLIKE_FRAME std::shared_ptr<ProcessGroupNCCL::WorkNCCL> ProcessGroupNCCL::send(at::Tensor& tensor, int dstRank) {
  return pointToPoint(
      tensor,
      [](at::Tensor& input, ncclComm_t comm, c10::cuda::CUDAStream& stream, int dst) {
        return ncclSend(input.data_ptr(), static_cast<std::size_t>(input.numel()), getNcclDataType(input.scalar_type()),
                        dst, comm, stream.stream());
      },
      dstRank, OpType::SEND);
}

TORCHLIKE_FRAME std::shared_ptr<ProcessGroupNCCL::WorkNCCL> ProcessGroupNCCL::recv(at::Tensor& tensor, int srcRank) {
  return pointToPoint(
      tensor,
      [](at::Tensor& output, ncclComm_t comm, c10::cuda::CUDAStream& stream, int src) {
        return ncclRecv(output.data_ptr(), static_cast<std::size_t>(output.numel()),
                        getNcclDataType(output.scalar_type()), src, comm, stream.stream());
      },
      srcRank, OpType::RECV);
}

// startCoalescing: the coalesced calls are issued inside one NCCL group.
TORCHLIKE_FRAME void ProcessGroupNCCL::startCoalescing() {
  coalescedDevice_ = -1;
  coalescedComm_ = nullptr;
  coalescing_state_ |= CoalActive;
  groupStart();
}

// endCoalescing: one Work for the whole group, its events around ncclGroupEnd.
TORCHLIKE_FRAME std::shared_ptr<ProcessGroupNCCL::WorkNCCL> ProcessGroupNCCL::endCoalescing() {
  if (!coalescedComm_) {
    groupEnd();
    coalescing_state_ = 0;
    return nullptr;
  }
  auto comm = coalescedComm_;
  const int device = coalescedDevice_;
  c10::cuda::CUDAStream ncclStream = ncclStreams_.at(getKeyFromDevice(device));
  auto work = std::make_shared<WorkNCCL>(device, OpType::COALESCED, (coalescing_state_ & CoalP2P) != 0);
  work->ncclComm_ = comm;
  work->blockingWait_ = blockingWait_;
  work->ncclStartEvent_->record(ncclStream);
  if (useNonblocking()) groupEndNonblocking(comm);
  else groupEnd();
  work->ncclEndEvent_->record(ncclStream);
  coalescing_state_ = 0;
  coalescedComm_ = nullptr;
  return work;
}

}  // namespace c10d

namespace torch::cuda::nccl {

// torch/csrc/cuda/nccl.cpp all2all_single_equal_split: without ncclAllToAll (stock builds), a
// group of one send and one receive per rank.
TORCHLIKE_FRAME TORCH_CUDA_CPP_API void all2all_single_equal_split(at::Tensor& input, at::Tensor& output, int size,
                                                                   ncclComm_t comm, c10::cuda::CUDAStream& stream) {
  int numranks = 0;
  const auto type = c10d::getNcclDataType(input.scalar_type());
  const std::size_t count = static_cast<std::size_t>(input.numel()) / static_cast<std::size_t>(size);
  const std::size_t rankdiff = input.nbytes() / static_cast<std::size_t>(size);
  const auto* sendbuff = static_cast<const char*>(input.data_ptr());
  auto* recvbuff = static_cast<char*>(output.data_ptr());
  c10d::check(ncclCommCount(comm, &numranks), "ncclCommCount");
  c10d::check(ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < numranks; ++r) {
    if (count != 0) {
      c10d::check(ncclSend(sendbuff + r * rankdiff, count, type, r, comm, stream.stream()), "ncclSend");
      c10d::check(ncclRecv(recvbuff + r * rankdiff, count, type, r, comm, stream.stream()), "ncclRecv");
    }
  }
  c10d::checkTimeout(ncclGroupEnd(), comm, "ncclGroupEnd", false);
}

}  // namespace torch::cuda::nccl

namespace c10d {

// alltoall_base with equal splits: collective() around all2all_single_equal_split.
TORCHLIKE_FRAME std::shared_ptr<ProcessGroupNCCL::WorkNCCL> ProcessGroupNCCL::alltoall_base(at::Tensor& output,
                                                                                            at::Tensor& input,
                                                                                            bool asyncOp) {
  TORCH_CHECK(input.numel() % size_ == 0, "Tensor's dim 0 does not divide equally across group size");
  return collective(
      input, output,
      [this](at::Tensor& in, at::Tensor& out, ncclComm_t comm, c10::cuda::CUDAStream& stream) {
        c10::cuda::CUDACachingAllocator::recordStream(out.data_ptr(), stream);
        torch::cuda::nccl::all2all_single_equal_split(in, out, size_, comm, stream);
        return ncclSuccess;
      },
      OpType::ALLTOALL_BASE, asyncOp);
}

}  // namespace c10d
