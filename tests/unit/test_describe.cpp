// What the shim records of a copy (shim/describe.hpp), on the simulated runtime (tests/simcuda):
// the direction from the cudaMemcpyKind, or for cudaMemcpyDefault from the runtime's pointer
// attributes, and which memory the host side is.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "describe.hpp"

namespace trainshim::shim::describe {
namespace {

// Memory of each kind, as the program's copies use it.
class DescribeCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaMalloc(&device_, kBytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&other_device_, kBytes), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(&pinned_, kBytes), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    cudaStreamDestroy(stream_);
    cudaFreeHost(pinned_);
    cudaFree(other_device_);
    cudaFree(device_);
  }

  static constexpr size_t kBytes = 1 << 16;
  void* device_ = nullptr;
  void* other_device_ = nullptr;
  void* pinned_ = nullptr;
  std::vector<char> pageable_ = std::vector<char>(kBytes);
  cudaStream_t stream_ = nullptr;
};

TEST_F(DescribeCopy, TheKindGivesTheDirectionAndTheHostSideIsClassified) {
  const Draft up = copy_linear(device_, pageable_.data(), 4096, cudaMemcpyHostToDevice, stream_);
  EXPECT_EQ(up.direction, Direction::HostToDevice);
  EXPECT_EQ(up.host_memory, HostMemory::Pageable);
  EXPECT_EQ(up.bytes, 4096u);
  EXPECT_EQ(up.stream, as_integer(stream_));

  const Draft pinned_up = copy_linear(device_, pinned_, 512, cudaMemcpyHostToDevice, stream_);
  EXPECT_EQ(pinned_up.direction, Direction::HostToDevice);
  EXPECT_EQ(pinned_up.host_memory, HostMemory::Pinned);

  const Draft down = copy_linear(pinned_, device_, 256, cudaMemcpyDeviceToHost, cudaStreamLegacy);
  EXPECT_EQ(down.direction, Direction::DeviceToHost);
  EXPECT_EQ(down.host_memory, HostMemory::Pinned) << "the destination is the host side";
  EXPECT_EQ(down.stream, as_integer(cudaStreamLegacy));

  const Draft pageable_down = copy_linear(pageable_.data(), device_, 256, cudaMemcpyDeviceToHost, stream_);
  EXPECT_EQ(pageable_down.direction, Direction::DeviceToHost);
  EXPECT_EQ(pageable_down.host_memory, HostMemory::Pageable);

  const Draft across = copy_linear(other_device_, device_, 128, cudaMemcpyDeviceToDevice, stream_);
  EXPECT_EQ(across.direction, Direction::DeviceToDevice);
  EXPECT_EQ(across.host_memory, HostMemory::Device);

  const Draft host = copy_linear(pageable_.data(), pinned_, 64, cudaMemcpyHostToHost, stream_);
  EXPECT_EQ(host.direction, Direction::HostToHost);
  EXPECT_EQ(host.host_memory, HostMemory::Pinned) << "the source is classified";
}

// Unified addressing: the runtime infers the direction from the pointers, and so does the shim.
TEST_F(DescribeCopy, DefaultKindIsResolvedThroughThePointerAttributes) {
  const Draft up = copy_linear(device_, pageable_.data(), 100, cudaMemcpyDefault, stream_);
  EXPECT_EQ(up.direction, Direction::HostToDevice);
  EXPECT_EQ(up.host_memory, HostMemory::Pageable);
  EXPECT_EQ(up.bytes, 100u);

  const Draft down = copy_linear(pinned_, device_, 100, cudaMemcpyDefault, stream_);
  EXPECT_EQ(down.direction, Direction::DeviceToHost);
  EXPECT_EQ(down.host_memory, HostMemory::Pinned);

  const Draft across = copy_linear(other_device_, device_, 100, cudaMemcpyDefault, stream_);
  EXPECT_EQ(across.direction, Direction::DeviceToDevice);
  EXPECT_EQ(across.host_memory, HostMemory::Device);

  const Draft host = copy_linear(pageable_.data(), pinned_, 100, cudaMemcpyDefault, stream_);
  EXPECT_EQ(host.direction, Direction::HostToHost);
  EXPECT_EQ(host.host_memory, HostMemory::Pinned) << "the source's memory";
}

// While the stream is captured into a graph the runtime is not asked (the copy is captured, not
// run): a default copy gets no direction, and an unseen host buffer no classification.
TEST_F(DescribeCopy, NothingIsAskedOfTheRuntimeWhileTheStreamIsCaptured) {
  std::vector<char> unseen(4096);
  ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Draft captured_default = copy_linear(device_, unseen.data(), 100, cudaMemcpyDefault, stream_);
  const Draft captured_up = copy_linear(device_, unseen.data(), 100, cudaMemcpyHostToDevice, stream_);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
  cudaGraphDestroy(graph);
  EXPECT_EQ(captured_default.direction, Direction::None);
  EXPECT_EQ(captured_default.host_memory, HostMemory::Unknown);
  EXPECT_EQ(captured_up.direction, Direction::HostToDevice);
  EXPECT_EQ(captured_up.host_memory, HostMemory::Unknown);
  EXPECT_EQ(copy_linear(device_, unseen.data(), 100, cudaMemcpyHostToDevice, stream_).host_memory, HostMemory::Pageable)
      << "asked once the capture ended";
}

// The shim's pinned table (filled by the cudaHostAlloc/cudaHostRegister hooks) answers before
// the runtime, and an answer remembered before the table changed is not reused.
TEST_F(DescribeCopy, ThePinnedTableAnswersFirst) {
  std::vector<char> buffer(8192);
  const auto begin = reinterpret_cast<uintptr_t>(buffer.data());
  auto host_memory = [&] {
    return copy_linear(device_, buffer.data(), 64, cudaMemcpyHostToDevice, stream_).host_memory;
  };
  EXPECT_EQ(host_memory(), HostMemory::Pageable);
  ASSERT_TRUE(pinned_ranges().add(begin, buffer.size()));
  EXPECT_EQ(host_memory(), HostMemory::Pinned) << "the remembered answer is older than the table";
  EXPECT_EQ(pinned_ranges().remove(begin), buffer.size());
  EXPECT_EQ(host_memory(), HostMemory::Pageable);
}

// cudaMemcpy3D between pointers: width (bytes) x height x depth; the addresses are the extents'
// origins. With a CUDA array the bytes are not known (the extent counts its elements).
TEST_F(DescribeCopy, ThreeDimensionalCopiesCountWidthTimesHeightTimesDepth) {
  cudaMemcpy3DParms p{};
  p.srcPtr = {pageable_.data(), 256, 256, 16};  // ptr, pitch, xsize, ysize
  p.dstPtr = {device_, 256, 256, 16};
  p.extent = {100, 8, 4};
  p.kind = cudaMemcpyHostToDevice;
  const Draft up = copy_3d(&p, stream_);
  EXPECT_EQ(up.bytes, 100u * 8 * 4);
  EXPECT_EQ(up.direction, Direction::HostToDevice);
  EXPECT_EQ(up.host_memory, HostMemory::Pageable);

  p.kind = cudaMemcpyDefault;
  EXPECT_EQ(copy_3d(&p, stream_).direction, Direction::HostToDevice);

  cudaMemcpy3DParms with_array = p;
  with_array.dstArray = reinterpret_cast<cudaArray_t>(0x1);
  with_array.kind = cudaMemcpyHostToDevice;
  const Draft to_array = copy_3d(&with_array, stream_);
  EXPECT_EQ(to_array.bytes, 0u);
  EXPECT_EQ(to_array.direction, Direction::HostToDevice);
  with_array.kind = cudaMemcpyDefault;
  EXPECT_EQ(copy_3d(&with_array, stream_).direction, Direction::None);
  EXPECT_EQ(copy_3d(nullptr, stream_).direction, Direction::None);
}

// The symbol is always device memory: only the other side is classified, and a kind that goes the
// wrong way (rejected by the runtime) gets no direction.
TEST_F(DescribeCopy, SymbolCopiesClassifyTheOtherSide) {
  const Draft to_symbol = copy_symbol(pinned_, true, 32, cudaMemcpyHostToDevice, stream_);
  EXPECT_EQ(to_symbol.direction, Direction::HostToDevice);
  EXPECT_EQ(to_symbol.host_memory, HostMemory::Pinned);
  EXPECT_EQ(to_symbol.bytes, 32u);

  const Draft from_symbol = copy_symbol(pageable_.data(), false, 32, cudaMemcpyDefault, stream_);
  EXPECT_EQ(from_symbol.direction, Direction::DeviceToHost);
  EXPECT_EQ(from_symbol.host_memory, HostMemory::Pageable);

  EXPECT_EQ(copy_symbol(device_, true, 32, cudaMemcpyDefault, stream_).direction, Direction::DeviceToDevice);
  EXPECT_EQ(copy_symbol(pinned_, true, 32, cudaMemcpyDeviceToHost, stream_).direction, Direction::None);
}

TEST(DescribeBatchAndPeer, BatchesSumTheirSizesPeerCopiesAreDeviceMemory) {
  const size_t sizes[] = {100, 200, 300};
  const Draft batch = copy_batch(sizes, 3, cudaStreamPerThread);
  EXPECT_EQ(batch.bytes, 600u);
  EXPECT_EQ(batch.direction, Direction::None) << "a batch's copies may go different ways";
  EXPECT_EQ(batch.stream, as_integer(cudaStreamPerThread));
  const Draft peer = copy_peer(4096, cudaStreamLegacy);
  EXPECT_EQ(peer.direction, Direction::Peer);
  EXPECT_EQ(peer.host_memory, HostMemory::Device);
  EXPECT_EQ(peer.bytes, 4096u);
}

}  // namespace
}  // namespace trainshim::shim::describe
