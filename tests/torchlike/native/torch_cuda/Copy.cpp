// Mirrors aten/src/ATen/native/cuda/Copy.cu: copy_kernel_cuda (static, registered as copy_stub's
// CUDA kernel). Device to device: cudaMemcpyAsync on the current stream (or a conversion
// kernel). Between host and device: a different dtype is converted on the source side first
// (copy_requires_temporaries); then non_blocking copies are cudaMemcpyAsync plus the host
// allocator's record_event, and blocking ones memcpy_and_sync, in either direction.
#include "cuda_native.h"

namespace at::native {
namespace {

// Mirrors copy_device_to_device.
TORCHLIKE_FRAME void copy_device_to_device(Tensor& dst, const Tensor& src) {
  const cudaStream_t stream = cuda::getCurrentCUDAStream().stream();
  if (dst.scalar_type() == src.scalar_type()) {
    C10_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  Tensor out = dst;
  cuda::launch_kernel([out = at::detail::kernel_arg(out), src = at::detail::kernel_arg(src)] {
    for (int64_t i = 0, n = src.numel(); i < n; ++i) store(out, i, load(src, i));
  });
}

TORCHLIKE_FRAME void copy_kernel_cuda(Tensor& dst, const Tensor& src, bool non_blocking) {
  if (dst.is_cuda() && src.is_cuda()) {
    copy_device_to_device(dst, src);
    return;
  }
  if (dst.scalar_type() != src.scalar_type()) {
    // copy_requires_temporaries: convert where the source lives, then copy.
    Tensor src_contig = _ops::to_device::call(src, src.device_type(), dst.scalar_type(), false, false);
    dst.copy_(src_contig, non_blocking);
    return;
  }
  const cudaMemcpyKind kind = dst.is_cuda() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  void* dst_ptr = dst.data_ptr();
  const void* src_ptr = src.data_ptr();
  const int64_t nbytes = static_cast<int64_t>(src.nbytes());
  const cuda::CUDAStream stream = cuda::getCurrentCUDAStream();
  if (non_blocking) {
    C10_CUDA_CHECK(cudaMemcpyAsync(dst_ptr, src_ptr, static_cast<std::size_t>(nbytes), kind, stream.stream()));
    void* host_ptr = dst.is_cpu() ? dst_ptr : const_cast<void*>(src_ptr);
    cuda::CachingHostAllocator::recordEvent(host_ptr, stream);
  } else {
    at::cuda::memcpy_and_sync(dst_ptr, src_ptr, nbytes, kind, stream.stream());
  }
}

// REGISTER_DISPATCH(copy_stub, &copy_kernel_cuda): copy_impl calls the kernel through the stub.
struct RegisterCopyStub {
  RegisterCopyStub() { detail::cuda_kernels().copy_stub = copy_kernel_cuda; }
};
const RegisterCopyStub register_copy_stub;

}  // namespace

}  // namespace at::native
