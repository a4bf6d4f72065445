// The sync classifier: one test per rule of its table (classifier.cpp, kRules), the rules that
// look only at the call's shape, is_sync, and the search for the user's own frame.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "classifier.hpp"

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
  s.api_class = "sync";
  s.native = {{module, function, "", 0}, {kTorchPython, "torch::autograd::THPVariable_call(_object*)", "", 0}};
  s.python = user_python();
  return s;
}

SyncShape copy_from(const std::string& function, const std::string& direction, const std::string& host_memory,
                    const std::string& module = kTorchCuda) {
  SyncShape s = sync_from(function, module);
  s.api = "cudaMemcpyAsync";
  s.api_class = "copy";
  s.direction = direction;
  s.host_memory = host_memory;
  return s;
}

SyncShape free_from(const std::string& function, const std::string& module = kTorchCuda) {
  SyncShape s = sync_from(function, module);
  s.api = "cudaFree";
  s.api_class = "free";
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
  expect_rule(classify(sync_from(frame, "/x/libc10_cuda.so")), "stream.synchronize",
              "torch.cuda.Stream.synchronize()", SyncKind::Explicit, frame);
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
  expect_rule(classify(sync_from(frame, "/x/libtorch_cpu.so")), "bool", "bool(tensor) / if tensor:",
              SyncKind::Hidden, frame);
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
  expect_rule(classify(sync_from(frame)), "masked_select", "masked_select() / boolean-mask indexing",
              SyncKind::Hidden, frame);
}

TEST(ClassifierRules, EmptyCache) {
  // The frame also contains "CUDACachingAllocator": the empty_cache rule comes first and wins.
  const std::string frame = "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache()";
  expect_rule(classify(free_from(frame, "/x/libc10_cuda.so")), "empty_cache", "torch.cuda.empty_cache()",
              SyncKind::Hidden, frame);
}

TEST(ClassifierRules, CachingAllocatorFlush) {
  const std::string frame =
      "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_cached_blocks()";
  expect_rule(classify(free_from(frame, "/x/libc10_cuda.so")), "allocator",
              "caching-allocator flush (out of cached memory)", SyncKind::Hidden, frame);
}

TEST(ClassifierRules, ToCopyIsCpuForASyncAndADeviceToHostCopy) {
  const std::string frame =
      "at::native::_to_copy(at::Tensor const&, std::optional<c10::ScalarType>, std::optional<c10::Layout>, "
      "std::optional<c10::Device>, std::optional<bool>, bool, std::optional<c10::MemoryFormat>)";
  expect_rule(classify(sync_from(frame, "/x/libtorch_cpu.so")), "cpu", "Tensor.cpu() / .to('cpu')", SyncKind::Hidden,
              frame);
  expect_rule(classify(copy_from(frame, "d2h", "pageable", "/x/libtorch_cpu.so")), "cpu", "Tensor.cpu() / .to('cpu')",
              SyncKind::Hidden, frame);
}

TEST(ClassifierRules, ToCopyIsNotCpuForAHostToDeviceCopy) {
  const std::string frame = "at::native::_to_copy(at::Tensor const&)";
  const Classification c = classify(copy_from(frame, "h2d", "pageable", "/x/libtorch_cpu.so"));
  EXPECT_NE(c.rule, "cpu");
  EXPECT_NE(c.native_frame, frame);
}

TEST(ClassifierRules, CopyIsCpuForASyncAndADeviceToHostCopy) {
  const std::string frame = "at::native::copy_(at::Tensor&, at::Tensor const&, bool)";
  expect_rule(classify(sync_from(frame, "/x/libtorch_cpu.so")), "cpu", "Tensor.cpu() / .to('cpu') / .copy_()",
              SyncKind::Hidden, frame);
  expect_rule(classify(copy_from(frame, "d2h", "pageable", "/x/libtorch_cpu.so")), "cpu",
              "Tensor.cpu() / .to('cpu') / .copy_()", SyncKind::Hidden, frame);
}

TEST(ClassifierRules, CopyIsNotCpuForAHostToDeviceCopy) {
  const std::string frame = "at::native::copy_(at::Tensor&, at::Tensor const&, bool)";
  const Classification c = classify(copy_from(frame, "h2d", "pageable", "/x/libtorch_cpu.so"));
  EXPECT_NE(c.rule, "cpu");
  EXPECT_NE(c.native_frame, frame);
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
  s.api_class = "sync";
  s.native = {{kTorchCuda, "at::native::_local_scalar_dense_cuda(at::Tensor const&)", "", 0},
              {"/x/libtorch_cpu.so", "at::_ops::_local_scalar_dense::call(at::Tensor const&)", "", 0},
              {"/x/libtorch_cpu.so", "at::native::item(at::Tensor const&)", "", 0},
              {"/x/libtorch_cpu.so", "at::native::is_nonzero(at::Tensor const&)", "", 0},
              {kTorchPython, "torch::autograd::THPVariable_bool_scalar(_object*, _object*)", "", 0}};
  s.python = user_python();
  const Classification c = classify(s);
  EXPECT_EQ(c.rule, "bool");
  EXPECT_EQ(c.operation, "bool(tensor) / if tensor:");
  EXPECT_EQ(c.native_frame, "at::native::is_nonzero(at::Tensor const&)");
}

// On CUDA, masked_select indexes with the mask, which expands it with nonzero(), so a real
// masked_select stack holds a nonzero frame below masked_select. It should still be masked_select.
TEST(ClassifierRules, MaskedSelectStackThatGoesThroughNonzeroIsMaskedSelect) {
  SyncShape s;
  s.api = "cudaStreamSynchronize";
  s.api_class = "sync";
  s.native = {{kTorchCuda, "at::native::nonzero_out_cuda(at::Tensor const&, at::Tensor&)", "", 0},
              {kTorchCuda, "at::native::nonzero_cuda(at::Tensor const&)", "", 0},
              {"/x/libtorch_cpu.so",
               "at::native::index(at::Tensor const&, c10::List<std::optional<at::Tensor> > const&)", "", 0},
              {kTorchCuda, "at::native::masked_select_cuda(at::Tensor const&, at::Tensor const&)", "", 0}};
  s.python = user_python();
  const Classification c = classify(s);
  EXPECT_EQ(c.rule, "masked_select");
  EXPECT_EQ(c.operation, "masked_select() / boolean-mask indexing");
  EXPECT_EQ(c.native_frame, "at::native::masked_select_cuda(at::Tensor const&, at::Tensor const&)");
}

// --- Rules on the call's shape alone ---------------------------------------------------------------

TEST(ClassifierShape, SyncFromTheMainProgramIsDirect) {
  SyncShape s = sync_from("main", "/work/app/train");
  s.api = "cudaDeviceSynchronize";
  s.python.clear();
  expect_rule(classify(s), "direct", "cudaDeviceSynchronize()", SyncKind::Explicit, "");
}

TEST(ClassifierShape, SyncThroughCtypesIsDirect) {
  expect_rule(classify(sync_from("_ctypes_callproc", kCtypes)), "direct", "cudaStreamSynchronize()",
              SyncKind::Explicit, "");
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
  expect_rule(classify(copy_from("foo::read_back(void*)", "d2h", "pageable", "/opt/lib/libfoo.so")), "pageable_d2h",
              "blocking D2H copy into pageable memory", SyncKind::Hidden, "");
}

TEST(ClassifierShape, FreeFromALibrary) {
  expect_rule(classify(free_from("foo::release(void*)", "/opt/lib/libfoo.so")), "free", "cudaFree()",
              SyncKind::Hidden, "");
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

TEST(ClassifierIsSync, SyncFreeAndPollClassesAreSyncs) {
  for (const char* cls : {"sync", "free", "poll"}) {
    SyncShape s;
    s.api_class = cls;
    EXPECT_TRUE(is_sync(s)) << cls;
  }
  SyncShape collective;
  collective.api_class = "collective";
  EXPECT_FALSE(is_sync(collective));
}

TEST(ClassifierIsSync, OnlyAPageableDeviceToHostCopyIsASync) {
  EXPECT_TRUE(is_sync(copy_from("f", "d2h", "pageable")));
  EXPECT_FALSE(is_sync(copy_from("f", "h2d", "pageable")));
  EXPECT_FALSE(is_sync(copy_from("f", "d2h", "pinned")));
  EXPECT_FALSE(is_sync(copy_from("f", "h2d", "pinned")));
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

TEST(ClassifierUserFrame, PythonInnermostUserFrameIsFirst) {
  EXPECT_EQ(top_user_python_frame(user_python()), 0);
}

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
