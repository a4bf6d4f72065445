// The sync classifier: one test per rule of its table (classifier.cpp, kRules), the rules that
// look only at the call's shape, is_sync, and the search for the user's own frame.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analyse/classifier.hpp"

namespace trainshim::cli {
namespace {

constexpr const char* kTorchCuda = "/x/libtorch_cuda.so";
constexpr const char* kTorchPython = "/x/libtorch_python.so";
constexpr const char* kCtypes = "/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so";
constexpr const char* kLibffi = "/usr/lib/x86_64-linux-gnu/libffi.so.8";

// The Python frames of a user's training script: its own line first, then the interpreter's
// frozen import machinery and an installed package above it.
std::vector<PythonFrameView> user_python() {
  return {{"/work/app/train.py", "train_step", "loss = step(batch)", 57},
          {"/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", "_call_impl", "", 1511},
          {"/work/app/train.py", "<module>", "main()", 120}};
}

// A blocking cudaStreamSynchronize whose innermost native frame is `function` in `module`, below
// a generic Python-binding frame that matches no rule.
SyncShape sync_from(const std::string& function, const std::string& module = kTorchCuda) {
  SyncShape s;
  s.api = "cudaStreamSynchronize";
  s.api_class = ApiClass::Sync;
  s.native = {{module, function, "", 0}, {kTorchPython, "torch::autograd::THPVariable_call(_object*)", "", 0}};
  s.python = user_python();
  return s;
}

SyncShape copy_from(const std::string& function, Direction direction, HostMemory host_memory,
                    const std::string& module = kTorchCuda) {
  SyncShape s = sync_from(function, module);
  s.api = "cudaMemcpyAsync";
  s.api_class = ApiClass::Copy;
  s.direction = direction;
  s.host_memory = host_memory;
  return s;
}

SyncShape free_from(const std::string& function, const std::string& module = kTorchCuda) {
  SyncShape s = sync_from(function, module);
  s.api = "cudaFree";
  s.api_class = ApiClass::Free;
  return s;
}

void expect_rule(const Classification& c, const char* rule, const char* operation, SyncKind kind,
                 const std::string& native_frame) {
  EXPECT_EQ(c.rule, rule);
  EXPECT_EQ(c.operation, operation);
  EXPECT_EQ(c.kind, kind);
  EXPECT_EQ(c.native_frame, native_frame);
  EXPECT_FALSE(c.cause.empty());
  EXPECT_FALSE(c.advice.empty());
}

// --- The rules of the table, one test each --------------------------------------------------------

TEST(ClassifierRules, DeviceSynchronizeIsTorchCudaSynchronize) {
  const std::string frame = "c10::cuda::device_synchronize()";
  expect_rule(classify(sync_from(frame, "/x/libc10_cuda.so")), "torch.cuda.synchronize", "torch.cuda.synchronize()",
              SyncKind::Explicit, frame);
}

TEST(ClassifierRules, PythonModuleSynchronizeIsTorchCudaSynchronize) {
  const std::string frame = "THCPModule_cudaSynchronize(_object*, _object*)";
  expect_rule(classify(sync_from(frame, kTorchPython)), "torch.cuda.synchronize", "torch.cuda.synchronize()",
              SyncKind::Explicit, frame);
}

TEST(ClassifierRules, StreamSynchronize) {
  const std::string frame = "c10::cuda::CUDAStream::synchronize() const";
  expect_rule(classify(sync_from(frame, "/x/libc10_cuda.so")), "stream.synchronize", "torch.cuda.Stream.synchronize()",
              SyncKind::Explicit, frame);
}

TEST(ClassifierRules, EventSynchronize) {
  SyncShape s = sync_from("at::cuda::CUDAEvent::synchronize() const");
  s.api = "cudaEventSynchronize";
  expect_rule(classify(s), "event.synchronize", "torch.cuda.Event.synchronize()", SyncKind::Explicit,
              "at::cuda::CUDAEvent::synchronize() const");
}

TEST(ClassifierRules, LocalScalarDenseIsItem) {
  const std::string frame = "at::native::_local_scalar_dense(at::Tensor const&)";
  expect_rule(classify(sync_from(frame)), "item", "Tensor.item()", SyncKind::Hidden, frame);
}

TEST(ClassifierRules, IsNonzeroIsBool) {
  const std::string frame = "at::native::is_nonzero(at::Tensor const&)";
  expect_rule(classify(sync_from(frame, "/x/libtorch_cpu.so")), "bool", "bool(tensor) / if tensor:", SyncKind::Hidden,
              frame);
}

TEST(ClassifierRules, TensorToListIsTolist) {
  const std::string frame = "torch::utils::tensor_to_list(at::Tensor const&)";
  expect_rule(classify(sync_from(frame, kTorchPython)), "tolist", "Tensor.tolist()", SyncKind::Hidden, frame);
}

TEST(ClassifierRules, Nonzero) {
  const std::string frame = "at::native::nonzero_cuda(at::Tensor const&)";
  expect_rule(classify(sync_from(frame)), "nonzero", "nonzero() / boolean-mask indexing", SyncKind::Hidden, frame);
}

TEST(ClassifierRules, MaskedSelect) {
  const std::string frame = "at::native::masked_select_cuda(at::Tensor const&, at::Tensor const&)";
  expect_rule(classify(sync_from(frame)), "masked_select", "masked_select()", SyncKind::Hidden, frame);
}

TEST(ClassifierRules, EmptyCache) {
  // The frame also contains "CUDACachingAllocator": the empty_cache rule comes first and wins.
  const std::string frame = "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache()";
  expect_rule(classify(free_from(frame, "/x/libc10_cuda.so")), "empty_cache", "torch.cuda.empty_cache()",
              SyncKind::Hidden, frame);
}

TEST(ClassifierRules, CachingAllocatorFlush) {
  const std::string frame = "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_cached_blocks()";
  expect_rule(classify(free_from(frame, "/x/libc10_cuda.so")), "allocator",
              "caching-allocator flush (out of cached memory)", SyncKind::Hidden, frame);
}

TEST(ClassifierRules, ToCopyIsCpuForASyncAndADeviceToHostCopy) {
  const std::string frame =
      "at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, "
      "std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>)";
  SyncShape wait = sync_from(frame, "/x/libtorch_cpu.so");
  wait.follows_copy = Direction::DeviceToHost;
  expect_rule(classify(wait), "cpu", "Tensor.cpu() / .to('cpu')", SyncKind::Hidden, frame);
  expect_rule(classify(copy_from(frame, Direction::DeviceToHost, HostMemory::Pageable, "/x/libtorch_cpu.so")), "cpu",
              "Tensor.cpu() / .to('cpu')", SyncKind::Hidden, frame);
}

TEST(ClassifierRules, ToCopyIsABlockingUploadForAHostToDeviceCopy) {
  const std::string frame = "at::native::_to_copy(at::Tensor const&)";
  const Classification c =
      classify(copy_from(frame, Direction::HostToDevice, HostMemory::Pageable, "/x/libtorch_cpu.so"));
  expect_rule(c, "upload", "Tensor.to('cuda') / .cuda() (blocking upload)", SyncKind::Hidden, frame);
}

TEST(ClassifierRules, CopyIsCpuForASyncAndADeviceToHostCopy) {
  const std::string frame = "at::native::copy_(at::Tensor&, at::Tensor const&, bool)";
  SyncShape wait = sync_from(frame, "/x/libtorch_cpu.so");
  wait.follows_copy = Direction::DeviceToHost;
  expect_rule(classify(wait), "cpu", "Tensor.copy_() into a host tensor", SyncKind::Hidden, frame);
  expect_rule(classify(copy_from(frame, Direction::DeviceToHost, HostMemory::Pageable, "/x/libtorch_cpu.so")), "cpu",
              "Tensor.copy_() into a host tensor", SyncKind::Hidden, frame);
}

TEST(ClassifierRules, CopyIsNotCpuForAHostToDeviceCopy) {
  const std::string frame = "at::native::copy_(at::Tensor&, at::Tensor const&, bool)";
  const Classification c =
      classify(copy_from(frame, Direction::HostToDevice, HostMemory::Pageable, "/x/libtorch_cpu.so"));
  EXPECT_EQ(c.rule, "upload");
  EXPECT_EQ(c.operation, "Tensor.copy_() from a host tensor (blocking upload)");
}

// A wait under a copy frame that follows no copy is not the copy's: the caching allocator's flush
// when an upload runs out of memory (R20) is the allocator's.
TEST(ClassifierRules, WaitUnderACopyFrameThatFollowsNoCopyIsNotTheCopy) {
  SyncShape s =
      sync_from("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::synchronize_and_free_events()",
                "/x/libc10_cuda.so");
  s.api = "cudaEventSynchronize";
  s.native.push_back({"/x/libc10_cuda.so",
                      "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned "
                      "long, CUstream_st*)",
                      "", 0});
  s.native.push_back({"/x/libtorch_cpu.so", "at::native::_to_copy(at::Tensor const&)", "", 0});
  s.native.push_back({"/x/libtorch_cpu.so", "at::_ops::_to_copy::call(at::Tensor const&)", "", 0});
  EXPECT_EQ(classify(s).rule, "allocator");
  s.follows_copy = Direction::DeviceToHost;
  EXPECT_EQ(classify(s).rule, "cpu");
}

TEST(ClassifierRules, RuleMatchesAnyFrameNotOnlyTheInnermost) {
  SyncShape s = sync_from("cudaStreamSynchronize_wrapper(CUstream_st*)", "/x/libfoo.so");
  s.native.push_back({kTorchCuda, "at::native::_local_scalar_dense(at::Tensor const&)", "", 0});
  expect_rule(classify(s), "item", "Tensor.item()", SyncKind::Hidden,
              "at::native::_local_scalar_dense(at::Tensor const&)");
}

TEST(ClassifierRules, ExplicitWinsOverHiddenWhenBothFramesArePresent) {
  // The hidden frame is the innermost one; the explicit rule still wins because it comes first.
  SyncShape s = sync_from("at::native::copy_(at::Tensor&, at::Tensor const&, bool)", "/x/libtorch_cpu.so");
  s.native.push_back({"/x/libc10_cuda.so", "c10::cuda::device_synchronize()", "", 0});
  expect_rule(classify(s), "torch.cuda.synchronize", "torch.cuda.synchronize()", SyncKind::Explicit,
              "c10::cuda::device_synchronize()");
}

// PyTorch's is_nonzero reads the value with self.item() (aten/src/ATen/native/prim_native_functions.cpp),
// so every real `if tensor:` stack holds _local_scalar_dense below is_nonzero. It should still be
// classified as the truth test the user wrote.
TEST(ClassifierRules, TruthTestStackThatGoesThroughItemIsBool) {
  SyncShape s;
  s.api = "cudaStreamSynchronize";
  s.api_class = ApiClass::Sync;
  s.native = {{kTorchCuda, "at::native::_local_scalar_dense_cuda(at::Tensor const&)", "", 0},
              {"/x/libtorch_cpu.so", "at::_ops::_local_scalar_dense::call(at::Tensor const&)", "", 0},
              {"/x/libtorch_cpu.so", "at::native::item(at::Tensor const&)", "", 0},
              {"/x/libtorch_cpu.so", "at::native::is_nonzero(at::Tensor const&)", "", 0},
              {kTorchPython, "torch::autograd::THPVariable_bool_scalar(_object*, _object*)", "", 0}};
  s.python = user_python();
  const Classification c = classify(s);
  EXPECT_EQ(c.rule, "bool");
  EXPECT_EQ(c.operation, "bool(tensor) / if tensor:");
  EXPECT_EQ(c.native_frame, "torch::autograd::THPVariable_bool_scalar(_object*, _object*)");
}

// On CUDA, masked_select indexes with the mask, which expands it with nonzero(), so a real
// masked_select stack holds a nonzero frame below masked_select. It should still be masked_select.
TEST(ClassifierRules, MaskedSelectStackThatGoesThroughNonzeroIsMaskedSelect) {
  SyncShape s;
  s.api = "cudaStreamSynchronize";
  s.api_class = ApiClass::Sync;
  s.native = {{kTorchCuda, "at::native::nonzero_out_cuda(at::Tensor const&, at::Tensor&)", "", 0},
              {kTorchCuda, "at::native::nonzero_cuda(at::Tensor const&)", "", 0},
              {"/x/libtorch_cpu.so",
               "at::native::index(at::Tensor const&, c10::List<std::optional<at::Tensor> > const&)", "", 0},
              {kTorchCuda, "at::native::masked_select_cuda(at::Tensor const&, at::Tensor const&)", "", 0}};
  s.python = user_python();
  const Classification c = classify(s);
  EXPECT_EQ(c.rule, "masked_select");
  EXPECT_EQ(c.operation, "masked_select()");
  EXPECT_EQ(c.native_frame, "at::native::masked_select_cuda(at::Tensor const&, at::Tensor const&)");
}

// --- Stacks shaped like a pip wheel's (pytorch-fidelity.md §2), innermost first -----------------

constexpr const char* kTorchCpu = "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so";
constexpr const char* kWheelCuda = "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so";
constexpr const char* kWheelPython = "/venv/lib/python3.12/site-packages/torch/lib/libtorch_python.so";
constexpr const char* kC10Cuda = "/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so";
constexpr const char* kLibPython = "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0";

// The native frames of one call: names innermost first; `stripped` blanks the names a wheel keeps
// only in .symtab (bindings, static and anonymous-namespace functions), as a stripped build shows them.
SyncShape wheel(const std::string& api, const std::vector<std::pair<const char*, const char*>>& frames,
                bool stripped = false) {
  SyncShape s;
  s.api = api;
  s.api_class = api.starts_with("cudaMemcpy") ? ApiClass::Copy : ApiClass::Sync;
  for (const auto& [module, function] : frames) {
    const std::string name = function;
    const bool exported = name.starts_with("at::_ops::") || name.starts_with("c10::") || name.starts_with("c10d::") ||
                          name.starts_with("at::native::");
    s.native.push_back({module, stripped && !exported ? "" : name, "", 0});
  }
  s.native.push_back({kLibPython, "_PyEval_EvalFrameDefault", "", 0});
  s.python = user_python();
  return s;
}

// `if t:`: the binding calls is_nonzero, which calls item(); "nonzero" must not match is_nonzero (R1).
SyncShape truth_test(bool stripped = false) {
  SyncShape s = wheel("cudaStreamSynchronize",
                      {{kWheelCuda, "at::native::_local_scalar_dense_cuda(at::Tensor const&)"},
                       {kTorchCpu, "at::_ops::_local_scalar_dense::call(at::Tensor const&)"},
                       {kTorchCpu, "at::native::item(at::Tensor const&)"},
                       {kTorchCpu, "at::_ops::item::call(at::Tensor const&)"},
                       {kTorchCpu, "at::native::is_nonzero(at::Tensor const&)"},
                       {kTorchCpu, "at::_ops::is_nonzero::call(at::Tensor const&)"},
                       {kWheelPython, "torch::autograd::THPVariable_is_nonzero(_object*, _object*)"},
                       {kWheelPython, "torch::autograd::THPVariable_bool_scalar(_object*, _object*)"}},
                      stripped);
  s.follows_copy = Direction::DeviceToHost;
  return s;
}

TEST(ClassifierWheelStacks, TruthTestIsBoolNotNonzero) {
  EXPECT_EQ(classify(truth_test()).rule, "bool");
  const Classification stripped = classify(truth_test(true));
  EXPECT_EQ(stripped.rule, "bool");
  EXPECT_EQ(stripped.native_frame, "at::_ops::is_nonzero::call(at::Tensor const&)");
}

TEST(ClassifierWheelStacks, CountNonzeroDoesNotMatchTheNonzeroRule) {
  SyncShape s = wheel("cudaStreamSynchronize", {{kTorchCpu, "at::_ops::count_nonzero::call(at::Tensor const&)"}});
  EXPECT_NE(classify(s).rule, "nonzero");
}

// copy_kernel_cuda: cudaMemcpyAsync then cudaStreamSynchronize for a blocking copy in either
// direction; the sync is the upload's when it follows an H2D copy (R2).
SyncShape blocking_copy_wait(Direction follows, bool stripped = false) {
  SyncShape s = wheel("cudaStreamSynchronize",
                      {{kWheelCuda, "at::native::copy_kernel_cuda(at::TensorIterator&, bool)"},
                       {kTorchCpu, "at::native::copy_impl(at::Tensor&, at::Tensor const&, bool)"},
                       {kTorchCpu, "at::native::copy_(at::Tensor&, at::Tensor const&, bool)"},
                       {kTorchCpu, "at::_ops::copy_::call(at::Tensor&, at::Tensor const&, bool)"},
                       {kTorchCpu, "at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>, bool)"},
                       {kTorchCpu, "at::_ops::_to_copy::call(at::Tensor const&, std::optional<c10::ScalarType>, bool)"},
                       {kTorchCpu, "at::native::to(at::Tensor const&, std::optional<c10::Device>, bool, bool)"},
                       {kTorchCpu, "at::_ops::to_device::call(at::Tensor const&, c10::Device, bool, bool)"},
                       {kWheelPython, "torch::autograd::THPVariable_to(_object*, _object*, _object*)"}},
                      stripped);
  s.follows_copy = follows;
  return s;
}

TEST(ClassifierWheelStacks, BlockingUploadIsNotCpu) {
  for (bool stripped : {false, true}) {
    const Classification up = classify(blocking_copy_wait(Direction::HostToDevice, stripped));
    EXPECT_EQ(up.rule, "upload") << stripped;
    EXPECT_EQ(up.operation, "Tensor.to('cuda') / .cuda() (blocking upload)");
    const Classification down = classify(blocking_copy_wait(Direction::DeviceToHost, stripped));
    EXPECT_EQ(down.rule, "cpu") << stripped;
    EXPECT_EQ(down.operation, "Tensor.cpu() / .to('cpu')");
  }
}

// Ops that read a size or a flag with item() inside are named after the op (R3).
TEST(ClassifierWheelStacks, OpsThatCallItemInsideAreNamedAfterTheOp) {
  const std::vector<std::pair<const char*, const char*>> item_inside = {
      {kWheelCuda, "at::native::_local_scalar_dense_cuda(at::Tensor const&)"},
      {kTorchCpu, "at::_ops::_local_scalar_dense::call(at::Tensor const&)"},
      {kTorchCpu, "at::native::item(at::Tensor const&)"},
      {kTorchCpu, "at::_ops::item::call(at::Tensor const&)"}};
  struct Case {
    const char* op_frame;
    const char* rule;
    const char* operation;
  };
  for (const Case& c :
       {Case{"at::_ops::_unique2::call(at::Tensor const&, bool, bool, bool)", "unique", "torch.unique()"},
        Case{"at::_ops::unique_dim::call(at::Tensor const&, long, bool, bool, bool)", "unique", "torch.unique()"},
        Case{"at::_ops::unique_consecutive::call(at::Tensor const&, bool, bool, std::optional<long>)", "unique",
             "torch.unique()"},
        Case{"at::_ops::repeat_interleave_Tensor::call(at::Tensor const&, std::optional<c10::SymInt>)",
             "repeat_interleave", "torch.repeat_interleave()"},
        Case{"at::_ops::equal::call(at::Tensor const&, at::Tensor const&)", "equal", "torch.equal()"},
        Case{"at::_ops::bincount::call(at::Tensor const&, std::optional<at::Tensor> const&, long)", "bincount",
             "torch.bincount()"},
        Case{"at::_ops::histc::call(at::Tensor const&, long, c10::Scalar const&, c10::Scalar const&)", "histc",
             "torch.histc()"}}) {
    auto frames = item_inside;
    frames.push_back({kWheelCuda, "at::native::(anonymous namespace)::op_impl<long>(at::Tensor const&)"});
    frames.push_back({kTorchCpu, c.op_frame});
    const Classification got = classify(wheel("cudaStreamSynchronize", frames, true));
    EXPECT_EQ(got.rule, c.rule) << c.op_frame;
    EXPECT_EQ(got.operation, c.operation) << c.op_frame;
    EXPECT_EQ(got.kind, SyncKind::Hidden);
  }
}

// No binding frame at all: a C++ extension calls the op, and torch's libraries carry other names
// (a vendored, renamed build). The outermost op-entry frame still names the operation.
TEST(ClassifierWheelStacks, OpCalledFromAnExtensionIsNamedFromItsOpEntryFrame) {
  constexpr const char* kRenamedCpu = "/opt/vendor/lib/libtorch_cpu-7f3e.so";
  constexpr const char* kRenamedCuda = "/opt/vendor/lib/libtorch_cuda-7f3e.so";
  constexpr const char* kExtension = "/opt/ext/my_ops.cpython-312-x86_64-linux-gnu.so";
  std::vector<std::pair<const char*, const char*>> frames = {
      {kRenamedCuda, "at::native::_local_scalar_dense_cuda(at::Tensor const&)"},
      {kRenamedCpu, "at::_ops::_local_scalar_dense::call(at::Tensor const&)"},
      {kRenamedCpu, "at::native::item(at::Tensor const&)"},
      {kRenamedCpu, "at::_ops::item::call(at::Tensor const&)"},
      {kRenamedCuda,
       "std::tuple<at::Tensor, at::Tensor, at::Tensor> at::native::internal::{anonymous}::compute_unique<float>("
       "at::Tensor const&, at::Tensor const&, bool, bool, bool)"},
      {kRenamedCuda, "at::native::_unique2_cuda(at::Tensor const&, bool, bool, bool)"},
      {kRenamedCpu, "at::_ops::_unique2::call(at::Tensor const&, bool, bool, bool)"},
      {kExtension, "my_ops::dedupe(at::Tensor const&)"}};
  for (bool stripped : {false, true}) {
    const Classification unique = classify(wheel("cudaStreamSynchronize", frames, stripped));
    EXPECT_EQ(unique.rule, "unique") << stripped;
    EXPECT_EQ(unique.operation, "torch.unique()");
  }
  // Without the op around it, the same read-back is the item() it is.
  frames.erase(frames.begin() + 4, frames.begin() + 7);
  EXPECT_EQ(classify(wheel("cudaStreamSynchronize", frames)).operation, "Tensor.item()");
}

// UniqueCub<bool> reads its count with memcpy_and_sync into a stack variable: a pageable D2H copy
// and a sync, both torch.unique().
TEST(ClassifierWheelStacks, UniqueOfABoolTensorCopyAndSyncAreUnique) {
  const std::vector<std::pair<const char*, const char*>> frames = {
      {kWheelCuda, "at::native::internal::unique_cuda_template<bool>(at::Tensor const&, bool, bool, bool)"},
      {kTorchCpu, "at::_ops::_unique2::call(at::Tensor const&, bool, bool, bool)"}};
  SyncShape copy = wheel("cudaMemcpyAsync", frames);
  copy.direction = Direction::DeviceToHost;
  copy.host_memory = HostMemory::Pageable;
  ASSERT_TRUE(is_sync(copy));
  EXPECT_EQ(classify(copy).rule, "unique");
  SyncShape wait = wheel("cudaStreamSynchronize", frames);
  wait.follows_copy = Direction::DeviceToHost;
  EXPECT_EQ(classify(wait).rule, "unique");
}

// _tensor_str._Formatter: masked_select, then per element a truth test and item(): one site (R4).
TEST(ClassifierWheelStacks, PrintingACudaTensorIsOneOperation) {
  SyncShape s = truth_test();
  s.python.insert(s.python.begin(),
                  {{"/venv/lib/python3.12/site-packages/torch/_tensor_str.py", "__init__", "", 145},
                   {"/venv/lib/python3.12/site-packages/torch/_tensor_str.py", "_tensor_str", "", 400},
                   {"/venv/lib/python3.12/site-packages/torch/_tensor.py", "__repr__", "", 568}});
  const Classification c = classify(s);
  EXPECT_EQ(c.rule, "print");
  EXPECT_EQ(c.operation, "print/repr of a CUDA tensor");
  EXPECT_EQ(c.kind, SyncKind::Hidden);
}

// torch.cuda.graph.__enter__ synchronises the device and empties the allocator's cache before each
// capture: both waits are the capture's, one site at the `with` line, not a synchronize() the user
// asked for nor an empty_cache() the user called.
TEST(ClassifierWheelStacks, GraphCaptureSyncsAreTheCapturesWhateverTorchCallsInside) {
  constexpr const char* kGraphs = "/venv/lib/python3.12/site-packages/torch/cuda/graphs.py";
  constexpr const char* kCuda = "/venv/lib/python3.12/site-packages/torch/cuda/__init__.py";
  constexpr const char* kMemory = "/venv/lib/python3.12/site-packages/torch/cuda/memory.py";
  SyncShape synchronize = wheel("cudaDeviceSynchronize", {{kC10Cuda, "c10::cuda::device_synchronize()"}});
  synchronize.python.insert(synchronize.python.begin(),
                            {{kCuda, "synchronize", "", 1080}, {kGraphs, "__enter__", "", 230}});
  SyncShape empty_cache =
      wheel("cudaFree", {{kC10Cuda, "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache()"}});
  empty_cache.api_class = ApiClass::Free;
  empty_cache.python.insert(empty_cache.python.begin(),
                            {{kMemory, "empty_cache", "", 224}, {kGraphs, "__enter__", "", 236}});
  for (const SyncShape& shape : {synchronize, empty_cache}) {
    SCOPED_TRACE(shape.api);
    const Classification c = classify(shape);
    EXPECT_EQ(c.rule, "graph_capture");
    EXPECT_EQ(c.key, "graph_capture");
    EXPECT_EQ(c.operation, "CUDA graph capture (torch.cuda.graph)");
    EXPECT_EQ(c.kind, SyncKind::Hidden);
  }
  // The same synchronize() called by the user's own line is the user's.
  SyncShape asked = wheel("cudaDeviceSynchronize", {{kC10Cuda, "c10::cuda::device_synchronize()"}});
  asked.python.insert(asked.python.begin(), {kCuda, "synchronize", "", 1080});
  EXPECT_EQ(classify(asked).rule, "torch.cuda.synchronize");
  // make_graphed_callables runs the user's module in its warm-up: an item() there is the user's
  // line inside it, not the capture's.
  SyncShape warm_up = truth_test();
  warm_up.python.push_back({kGraphs, "make_graphed_callables", "", 420});
  EXPECT_EQ(classify(warm_up).rule, "bool");
}

// CUDAEvent::synchronize and (up to 2.6) CUDAStream::synchronize are inline: only the binding is
// left (R5); WorkNCCL::synchronize waits for a barrier (R6). All asked for by the code.
TEST(ClassifierWheelStacks, EventStreamAndBarrierWaitsAreExplicit) {
  struct Case {
    const char* api;
    std::vector<std::pair<const char*, const char*>> frames;
    const char* rule;
    const char* operation;
  };
  const std::vector<Case> cases = {
      {"cudaEventSynchronize",
       {{kWheelPython, "THCPEvent_synchronize(_object*, _object*)"}},
       "event.synchronize",
       "torch.cuda.Event.synchronize()"},
      {"cudaStreamSynchronize",
       {{kWheelPython, "THCPStream_synchronize(_object*, _object*)"}},
       "stream.synchronize",
       "torch.cuda.Stream.synchronize()"},
      {"cudaStreamSynchronize",
       {{kC10Cuda, "c10::cuda::CUDAStream::synchronize() const"},
        {kWheelPython, "THCPStream_synchronize(_object*, _object*)"}},
       "stream.synchronize",
       "torch.cuda.Stream.synchronize()"},
      {"cudaStreamSynchronize",
       {{"/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so",
         "c10d::ProcessGroupNCCL::WorkNCCL::synchronize()"},
        {kWheelCuda, "c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)"},
        {kWheelPython, "pybind11::cpp_function::dispatcher(_object*, _object*, _object*)"}},
       "barrier",
       "dist.barrier() / Work.wait()"},
  };
  for (const Case& c : cases) {
    const Classification got = classify(wheel(c.api, c.frames));
    EXPECT_EQ(got.rule, c.rule) << c.frames.front().second;
    EXPECT_EQ(got.operation, c.operation);
    EXPECT_EQ(got.kind, SyncKind::Explicit);
  }
}

TEST(ClassifierWheelStacks, StreamQueryIsAPollNamedAfterTheStream) {
  SyncShape s = wheel("cudaStreamQuery", {{kC10Cuda, "c10::cuda::CUDAStream::query() const"},
                                          {kWheelPython, "THCPStream_query(_object*, _object*)"}});
  s.api_class = ApiClass::Poll;
  EXPECT_TRUE(is_poll(s));
  EXPECT_FALSE(is_sync(s));
  EXPECT_EQ(poll_operation(s), "torch.cuda.Stream.query()");
  s.native = {{kCtypes, "_ctypes_callproc", "", 0}};
  EXPECT_EQ(poll_operation(s), "cudaStreamQuery()");
}

TEST(ClassifierQualifiedName, DropsReturnTypeTemplateArgumentsAndParameters) {
  EXPECT_EQ(qualified_name("at::_ops::is_nonzero::call(at::Tensor const&)"), "at::_ops::is_nonzero::call");
  EXPECT_EQ(qualified_name("void at::native::(anonymous namespace)::nonzero_cuda_out_impl<float>(at::Tensor const&, "
                           "at::Tensor&)"),
            "at::native::{anonymous}::nonzero_cuda_out_impl");
  EXPECT_EQ(qualified_name("std::vector<int, std::allocator<int> > ns::f<std::pair<int, int> >(int)"), "ns::f");
  EXPECT_EQ(qualified_name("THCPEvent_synchronize"), "THCPEvent_synchronize");
  EXPECT_EQ(qualified_name("c10::cuda::CUDAStream::synchronize() const"), "c10::cuda::CUDAStream::synchronize");
  EXPECT_EQ(qualified_name(""), "");
}

// --- Rules on the call's shape alone ---------------------------------------------------------------

TEST(ClassifierShape, SyncFromTheMainProgramIsDirect) {
  SyncShape s = sync_from("main", "/work/app/train");
  s.api = "cudaDeviceSynchronize";
  s.python.clear();
  expect_rule(classify(s), "direct", "cudaDeviceSynchronize()", SyncKind::Explicit, "");
}

TEST(ClassifierShape, SyncThroughCtypesIsDirect) {
  expect_rule(classify(sync_from("_ctypes_callproc", kCtypes)), "direct", "cudaStreamSynchronize()", SyncKind::Explicit,
              "");
}

TEST(ClassifierShape, SyncThroughLibffiIsDirect) {
  SyncShape s = sync_from("ffi_call_unix64", kLibffi);
  s.native.push_back({kCtypes, "_ctypes_callproc", "", 0});
  expect_rule(classify(s), "direct", "cudaStreamSynchronize()", SyncKind::Explicit, "");
}

TEST(ClassifierShape, RuleFrameWinsOverADirectCall) {
  // A C++ program linked against libtorch: the rule frame is found even though the program is on the stack.
  SyncShape s = sync_from("at::native::_local_scalar_dense(at::Tensor const&)");
  s.native.push_back({"/work/app/train", "main", "/work/app/train.cpp", 12});
  expect_rule(classify(s), "item", "Tensor.item()", SyncKind::Hidden,
              "at::native::_local_scalar_dense(at::Tensor const&)");
}

TEST(ClassifierShape, PageableDeviceToHostCopyFromALibrary) {
  expect_rule(
      classify(copy_from("foo::read_back(void*)", Direction::DeviceToHost, HostMemory::Pageable, "/opt/lib/libfoo.so")),
      "pageable_d2h", "blocking D2H copy into pageable memory", SyncKind::Hidden, "");
}

TEST(ClassifierShape, FreeFromALibrary) {
  expect_rule(classify(free_from("foo::release(void*)", "/opt/lib/libfoo.so")), "free", "cudaFree()", SyncKind::Hidden,
              "");
}

TEST(ClassifierShape, SyncFromAnUnknownLibraryIsUnclassified) {
  expect_rule(classify(sync_from("foo::wait()", "/opt/lib/libfoo.so")), "unclassified",
              "cudaStreamSynchronize() in libfoo.so", SyncKind::Hidden, "foo::wait()");
}

TEST(ClassifierShape, SyncWithoutNativeFramesIsUnclassified) {
  SyncShape s = sync_from("unused");
  s.native.clear();
  expect_rule(classify(s), "unclassified", "cudaStreamSynchronize() in an unknown library", SyncKind::Hidden, "");
}

// The key names an operation in baselines and diffs: one per line of the rule table and per
// shape, never its words.
TEST(ClassifierKeys, EachRuleLineAndShapeHasItsOwnKey) {
  const std::string to_copy = "at::native::_to_copy(at::Tensor const&)";
  const std::string copy = "at::native::copy_(at::Tensor&, at::Tensor const&, bool)";
  auto key = [](const SyncShape& shape) { return classify(shape).key; };
  EXPECT_EQ(key(copy_from(to_copy, Direction::DeviceToHost, HostMemory::Pageable, "/x/libtorch_cpu.so")), "cpu");
  EXPECT_EQ(key(copy_from(copy, Direction::DeviceToHost, HostMemory::Pageable, "/x/libtorch_cpu.so")), "cpu/copy_");
  EXPECT_EQ(key(copy_from(to_copy, Direction::HostToDevice, HostMemory::Pageable, "/x/libtorch_cpu.so")), "upload");
  EXPECT_EQ(key(copy_from(copy, Direction::HostToDevice, HostMemory::Pageable, "/x/libtorch_cpu.so")), "upload/copy_");
  EXPECT_EQ(key(sync_from("at::_ops::item::call(at::Tensor const&)", "/x/libtorch_cpu.so")), "item");
  EXPECT_EQ(key(sync_from("foo::wait()", "/opt/lib/libfoo.so")), "unclassified/cudaStreamSynchronize/libfoo.so");
  EXPECT_EQ(
      key(copy_from("foo::read_back(void*)", Direction::DeviceToHost, HostMemory::Pageable, "/opt/lib/libfoo.so")),
      "pageable_d2h/cudaMemcpyAsync");
  SyncShape memcpy = copy_from("foo::put(void*)", Direction::HostToDevice, HostMemory::Pinned, "/opt/lib/libfoo.so");
  memcpy.api = "cudaMemcpy";
  EXPECT_EQ(key(memcpy), "blocking_copy/cudaMemcpy/h2d");
  EXPECT_EQ(key(free_from("foo::release(void*)", "/opt/lib/libfoo.so")), "free");
  EXPECT_EQ(key(sync_from("main", "/work/app/trainer")), "direct/cudaStreamSynchronize");
}

// A frame's module is empty when it is unknown (classifier.hpp); the operation should then say so
// rather than end in "in ".
TEST(ClassifierShape, SyncFromAFrameWithoutModuleNamesAnUnknownLibrary) {
  SyncShape s = sync_from("", "");
  const Classification c = classify(s);
  EXPECT_EQ(c.rule, "unclassified");
  EXPECT_EQ(c.kind, SyncKind::Hidden);
  EXPECT_EQ(c.operation, "cudaStreamSynchronize() in an unknown library");
}

// ".so" is looked for anywhere in the path, so a program in a directory such as "acme.software"
// is taken for a shared library.
TEST(ClassifierShape, ProgramInADirectoryContainingDotSoIsNotALibrary) {
  SyncShape s = sync_from("main", "/opt/acme.software/bin/train");
  s.api = "cudaDeviceSynchronize";
  s.python.clear();
  EXPECT_EQ(classify(s).rule, "direct");
  EXPECT_EQ(top_user_native_frame({{kTorchCuda, "f", "", 0}, {"/opt/acme.software/bin/train", "main", "", 0}}), 1);
}

// --- is_sync -----------------------------------------------------------------------------------------

TEST(ClassifierIsSync, SyncAndFreeClassesAreSyncsPollsAndCollectivesAreNot) {
  for (const ApiClass cls : {ApiClass::Sync, ApiClass::Free}) {
    SyncShape s;
    s.api_class = cls;
    EXPECT_TRUE(is_sync(s)) << api_class_name(cls);
  }
  for (const ApiClass cls : {ApiClass::Poll, ApiClass::Collective, ApiClass::PinnedAlloc}) {
    SyncShape s;
    s.api_class = cls;
    EXPECT_FALSE(is_sync(s)) << api_class_name(cls);
  }
  SyncShape poll;
  poll.api_class = ApiClass::Poll;
  EXPECT_TRUE(is_poll(poll));
}

TEST(ClassifierIsSync, FreeOfNullIsNotASync) {
  SyncShape s = free_from("at::cuda::detail::initializeCudaContext()");
  s.null_object = true;
  EXPECT_FALSE(is_sync(s));
}

TEST(ClassifierIsSync, AsynchronousCopyWaitsOnlyIntoPageableMemoryOrBetweenHostBuffers) {
  EXPECT_TRUE(is_sync(copy_from("f", Direction::DeviceToHost, HostMemory::Pageable)));
  EXPECT_TRUE(is_sync(copy_from("f", Direction::HostToHost, HostMemory::Pageable)));
  EXPECT_FALSE(is_sync(copy_from("f", Direction::HostToDevice, HostMemory::Pageable)));
  EXPECT_FALSE(is_sync(copy_from("f", Direction::DeviceToHost, HostMemory::Pinned)));
  EXPECT_FALSE(is_sync(copy_from("f", Direction::HostToDevice, HostMemory::Pinned)));
  EXPECT_FALSE(is_sync(copy_from("f", Direction::DeviceToDevice, HostMemory::Device)));
}

// CUDA's "API synchronization behavior": a synchronous cudaMemcpy returns once the copy is done
// (D2H, pinned H2D), after a stream sync (pageable H2D); device to device it does not wait.
TEST(ClassifierIsSync, SynchronousCopyWaitsInEveryDirectionButDeviceToDevice) {
  for (const char* api : {"cudaMemcpy", "cudaMemcpy_ptds", "cudaMemcpy2D", "cudaMemcpy2D_ptds"}) {
    for (const Direction direction : {Direction::HostToDevice, Direction::DeviceToHost, Direction::HostToHost})
      for (const HostMemory memory : {HostMemory::Pinned, HostMemory::Pageable}) {
        SyncShape s = copy_from("f", direction, memory);
        s.api = api;
        EXPECT_TRUE(is_sync(s)) << api << " " << direction_name(direction) << " " << host_memory_name(memory);
      }
    SyncShape d2d = copy_from("f", Direction::DeviceToDevice, HostMemory::Device);
    d2d.api = api;
    EXPECT_FALSE(is_sync(d2d)) << api;
    SyncShape unknown = copy_from("f", Direction::None, HostMemory::Unknown);
    unknown.api = api;
    EXPECT_FALSE(is_sync(unknown)) << api;
  }
}

TEST(ClassifierShape, SynchronousUploadFromALibraryIsABlockingCopy) {
  SyncShape s =
      copy_from("foo::upload(void const*)", Direction::HostToDevice, HostMemory::Pinned, "/opt/lib/libfoo.so");
  s.api = "cudaMemcpy";
  expect_rule(classify(s), "blocking_copy", "cudaMemcpy() h2d", SyncKind::Hidden, "");
}

// --- The user's own frame ----------------------------------------------------------------------------

TEST(ClassifierUserFrame, PythonSkipsPackagesStandardLibraryAndFrozenFrames) {
  const std::vector<PythonFrameView> frames = {
      {"/usr/lib/python3.11/site-packages/torch/_tensor.py", "item", "", 1},
      {"/usr/lib/python3/dist-packages/numpy/core/fromnumeric.py", "sum", "", 2},
      {"/usr/lib/python3.11/contextlib.py", "__exit__", "", 3},
      {"<frozen importlib._bootstrap>", "_call_with_frames_removed", "", 4},
      {"/work/app/train.py", "train_step", "loss.item()", 57},
      {"/work/app/main.py", "<module>", "train()", 9}};
  EXPECT_EQ(top_user_python_frame(frames), 4);
}

TEST(ClassifierUserFrame, PythonInnermostUserFrameIsFirst) { EXPECT_EQ(top_user_python_frame(user_python()), 0); }

TEST(ClassifierUserFrame, PythonAllFrameworkFramesGivesTheInnermost) {
  const std::vector<PythonFrameView> frames = {{"/usr/lib/python3.11/site-packages/torch/_tensor.py", "item", "", 1},
                                               {"<string>", "<module>", "", 1}};
  EXPECT_EQ(top_user_python_frame(frames), 0);
}

TEST(ClassifierUserFrame, PythonNoFramesGivesNone) { EXPECT_EQ(top_user_python_frame({}), -1); }

TEST(ClassifierUserFrame, NativeFirstFrameOutsideSharedLibraries) {
  const std::vector<NativeFrameView> frames = {
      {kTorchCuda, "at::native::_local_scalar_dense(at::Tensor const&)", "", 0},
      {"/usr/lib/x86_64-linux-gnu/libc.so.6", "__libc_start_call_main", "", 0},
      {"/work/app/train", "train_step()", "/work/app/train.cpp", 42},
      {"/work/app/train", "main", "/work/app/train.cpp", 80}};
  EXPECT_EQ(top_user_native_frame(frames), 2);
}

TEST(ClassifierUserFrame, NativeSkipsFramesWithoutModule) {
  const std::vector<NativeFrameView> frames = {{"", "", "", 0}, {"/work/app/train", "main", "", 0}};
  EXPECT_EQ(top_user_native_frame(frames), 1);
}

TEST(ClassifierUserFrame, NativeAllLibrariesGivesTheInnermost) {
  const std::vector<NativeFrameView> frames = {{kTorchCuda, "f", "", 0}, {kLibffi, "ffi_call_unix64", "", 0}};
  EXPECT_EQ(top_user_native_frame(frames), 0);
}

TEST(ClassifierUserFrame, NativeNoFramesGivesNone) { EXPECT_EQ(top_user_native_frame({}), -1); }

}  // namespace
}  // namespace trainshim::cli
