// torch.distributed's native side, reduced to the NCCL backend: the store the ranks exchange the
// NCCL unique ids through (torch/csrc/distributed/c10d/Store.hpp, FileStore.hpp, PrefixStore.hpp),
// the communicator wrapper (NCCLUtils.hpp NCCLComm) and ProcessGroupNCCL with its WorkNCCL
// (ProcessGroupNCCL.hpp). The classes are exported from libtorch_cpu / libtorch_cuda as the real
// ones are (TORCH_API / TORCH_CUDA_CPP_API), so their frames keep their names in .dynsym.
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "torchlike/aten.h"
#include "torchlike/cuda_event.h"

namespace c10d {

// Store.hpp: every rank's view of one key-value space; get() waits for the key.
class TORCH_API Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{300000};
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  virtual std::vector<uint8_t> get(const std::string& key) = 0;
  void setTimeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

// FileStore.hpp: a store in the file system, shared by the ranks of one machine. The real one
// appends every key to one locked file; this one writes one file per key, renamed into place.
class TORCH_API FileStore : public Store {
 public:
  FileStore(std::string path, int numWorkers);
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;

 private:
  std::string path_;
};

// PrefixStore.hpp: one store shared by several users, each with its own key prefix.
class TORCH_API PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);
  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;

 private:
  std::string prefix_;
  std::shared_ptr<Store> store_;
};

// Work.hpp kNoTimeout: wait() without a timeout.
constexpr std::chrono::milliseconds kNoTimeout{0};

enum class OpType : uint8_t { ALLREDUCE, BARRIER, SEND, RECV, ALLTOALL_BASE, COALESCED };
// ReduceOp.hpp, the enumerators torch.distributed.ReduceOp exposes.
enum class ReduceOp : uint8_t { SUM = 0, AVG = 1, PRODUCT = 2, MIN = 3, MAX = 4 };

// NCCLUtils.hpp: owns one ncclComm_t; in non-blocking mode it is usable once
// ncclCommGetAsyncError stops answering ncclInProgress.
class TORCH_CUDA_CPP_API NCCLComm {
 public:
  ~NCCLComm();
  static std::shared_ptr<NCCLComm> create(int numRanks, int rank, ncclUniqueId commId, int deviceIndex,
                                          ncclConfig_t& config);
  static std::shared_ptr<NCCLComm> create_scalable(int numRanks, int rank, std::vector<ncclUniqueId>& commIds,
                                                   int deviceIndex, ncclConfig_t& config);
  static std::shared_ptr<NCCLComm> split(NCCLComm* source, int color_id, int rank, ncclConfig_t& config);
  ncclComm_t getNcclComm();
  void abort();
  bool isAborted() const { return aborted_; }
  int deviceIndex() const { return deviceIndex_; }

 private:
  ncclComm_t ncclComm_ = nullptr;
  int rank_ = -1;
  int deviceIndex_ = -1;
  bool nonBlocking_ = false;
  bool initialized_ = false;
  bool aborted_ = false;
  int ncclCommSplitCounter_ = 0;
  std::mutex mutex_;
};

class TORCH_CUDA_CPP_API ProcessGroupNCCL {
 public:
  struct Options {
    bool is_high_priority_stream = false;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ProcessGroupNCCL* split_from = nullptr;
    int split_color = 0;
  };

  // ProcessGroupNCCL::WorkNCCL: the handle of one enqueued operation (or one coalesced group).
  class TORCH_CUDA_CPP_API WorkNCCL {
   public:
    WorkNCCL(int device, OpType opType, bool isP2P);
    bool isCompleted();
    bool wait(std::chrono::milliseconds timeout = kNoTimeout);
    void synchronize();
    void synchronizeStream();

    int device_;
    OpType opType_;
    bool isP2P_;
    bool isBarrierOp_ = false;
    bool blockingWait_ = false;
    std::shared_ptr<at::cuda::CUDAEvent> ncclStartEvent_;
    std::shared_ptr<at::cuda::CUDAEvent> ncclEndEvent_;
    std::shared_ptr<NCCLComm> ncclComm_;
    std::vector<at::Tensor> stashed_;  // keeps the tensors alive until the work is waited for
  };

  ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, Options options);
  ~ProcessGroupNCCL();
  int getRank() const { return rank_; }
  int getSize() const { return size_; }

  std::shared_ptr<WorkNCCL> allreduce(at::Tensor& tensor, ReduceOp op, bool asyncOp);
  std::shared_ptr<WorkNCCL> barrier(int device);
  std::shared_ptr<WorkNCCL> send(at::Tensor& tensor, int dstRank);
  std::shared_ptr<WorkNCCL> recv(at::Tensor& tensor, int srcRank);
  std::shared_ptr<WorkNCCL> alltoall_base(at::Tensor& output, at::Tensor& input, bool asyncOp);
  void startCoalescing();
  std::shared_ptr<WorkNCCL> endCoalescing();
  void eagerConnectSingleDevice(int device);
  void performNocolorSplit(int device);
  void shutdown();

 private:
  template <typename Fn>
  std::shared_ptr<WorkNCCL> collective(at::Tensor& input, at::Tensor& output, Fn fn, OpType opType, bool asyncOp);
  template <typename Fn>
  std::shared_ptr<WorkNCCL> pointToPoint(at::Tensor& tensor, Fn fn, int peer, OpType opType);
  std::shared_ptr<WorkNCCL> allreduce_impl(at::Tensor& tensor, ReduceOp op, bool asyncOp);
  std::shared_ptr<NCCLComm> getNCCLComm(const std::string& deviceKey);
  std::shared_ptr<NCCLComm> initNCCLComm(const std::string& deviceKey, int device, OpType opType, int p2pRank = 0,
                                         bool isSendRecvSelf = false);
  void broadcastUniqueNCCLID(ncclUniqueId* ncclID, bool isSingleP2POp, const std::string& p2pKey, int p2pRank);
  void allgatherUniqueNCCLIDs(int rootIdx, ncclUniqueId* ncclID, std::vector<ncclUniqueId>& ncclIDs);
  void groupStart();
  void groupEnd();
  void groupEndNonblocking(const std::shared_ptr<NCCLComm>& comm);
  bool useNonblocking() const;
  int guessDeviceForRank() const;

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  Options options_;
  bool blockingWait_;  // TORCH_NCCL_BLOCKING_WAIT
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<NCCLComm>> devNCCLCommMap_;
  std::map<std::string, c10::cuda::CUDAStream> ncclStreams_;
  std::map<std::string, at::cuda::CUDAEvent> ncclEvents_;
  uint64_t ncclCommCounter_ = 0;
  int ncclActiveGroupCounter_ = 0;
  int coalescing_state_ = 0;
  std::shared_ptr<NCCLComm> coalescedComm_;
  int coalescedDevice_ = -1;
  int boundDevice_ = -1;
  std::vector<int> usedDeviceIdxs_;
};

}  // namespace c10d
