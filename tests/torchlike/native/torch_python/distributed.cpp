// Mirrors torch/csrc/distributed/c10d/init.cpp: the bindings of torch._C._distributed_c10d
// (Store, PrefixStore, FileStore, ProcessGroupNCCL, Work). Real torch adds them to torch._C when
// torch/distributed/__init__.py calls torch._C._c10d_init(); here they join torch._C's table when
// the library loads, named c10d_*, and are called through ctypes as the rest of torch._C is (the
// GIL is released around each call, as py::call_guard<py::gil_scoped_release> does).
#include <memory>

#include "python_bindings.h"
#include "torchlike/c10d.h"

namespace torch::distributed::c10d {
namespace {

using ::c10d::ProcessGroupNCCL;
using StoreHandle = std::shared_ptr<::c10d::Store>;
using WorkHandle = std::shared_ptr<ProcessGroupNCCL::WorkNCCL>;

StoreHandle& store(void* handle) { return *static_cast<StoreHandle*>(handle); }
ProcessGroupNCCL& group(void* handle) { return *static_cast<ProcessGroupNCCL*>(handle); }
void* work_handle(WorkHandle work) { return work ? new WorkHandle(std::move(work)) : nullptr; }

void* FileStore_new(const char* path, int64_t numWorkers) {
  HANDLE_TH_ERRORS
  return new StoreHandle(std::make_shared<::c10d::FileStore>(path, static_cast<int>(numWorkers)));
  END_HANDLE_TH_ERRORS(nullptr)
}

void* PrefixStore_new(const char* prefix, void* base) {
  HANDLE_TH_ERRORS
  return new StoreHandle(std::make_shared<::c10d::PrefixStore>(prefix, store(base)));
  END_HANDLE_TH_ERRORS(nullptr)
}

void Store_set_timeout(void* self, int64_t milliseconds) {
  store(self)->setTimeout(std::chrono::milliseconds(milliseconds));
}

void Store_delete(void* self) { delete static_cast<StoreHandle*>(self); }

void* ProcessGroupNCCL_new(void* baseStore, int64_t rank, int64_t size, int64_t highPriority, void* splitFrom,
                           int64_t splitColor) {
  HANDLE_TH_ERRORS
  ProcessGroupNCCL::Options options;
  options.is_high_priority_stream = highPriority != 0;
  options.split_from = static_cast<ProcessGroupNCCL*>(splitFrom);
  options.split_color = static_cast<int>(splitColor);
  return new ProcessGroupNCCL(store(baseStore), static_cast<int>(rank), static_cast<int>(size), options);
  END_HANDLE_TH_ERRORS(nullptr)
}

void ProcessGroupNCCL_delete(void* self) { delete static_cast<ProcessGroupNCCL*>(self); }

void ProcessGroupNCCL_shutdown(void* self) {
  HANDLE_TH_ERRORS
  group(self).shutdown();
  END_HANDLE_TH_ERRORS()
}

void ProcessGroupNCCL_eager_connect_single_device(void* self, int64_t device) {
  HANDLE_TH_ERRORS
  group(self).eagerConnectSingleDevice(static_cast<int>(device));
  END_HANDLE_TH_ERRORS()
}

void ProcessGroupNCCL_perform_nocolor_split(void* self, int64_t device) {
  HANDLE_TH_ERRORS
  group(self).performNocolorSplit(static_cast<int>(device));
  END_HANDLE_TH_ERRORS()
}

void* ProcessGroupNCCL_allreduce(void* self, void* tensor, int64_t op, int64_t asyncOp) {
  HANDLE_TH_ERRORS
  return work_handle(group(self).allreduce(unpack(tensor), static_cast<::c10d::ReduceOp>(op), asyncOp != 0));
  END_HANDLE_TH_ERRORS(nullptr)
}

void* ProcessGroupNCCL_barrier(void* self, int64_t device) {
  HANDLE_TH_ERRORS
  return work_handle(group(self).barrier(static_cast<int>(device)));
  END_HANDLE_TH_ERRORS(nullptr)
}

void* ProcessGroupNCCL_send(void* self, void* tensor, int64_t dst) {
  HANDLE_TH_ERRORS
  return work_handle(group(self).send(unpack(tensor), static_cast<int>(dst)));
  END_HANDLE_TH_ERRORS(nullptr)
}

void* ProcessGroupNCCL_recv(void* self, void* tensor, int64_t src) {
  HANDLE_TH_ERRORS
  return work_handle(group(self).recv(unpack(tensor), static_cast<int>(src)));
  END_HANDLE_TH_ERRORS(nullptr)
}

void ProcessGroupNCCL_start_coalescing(void* self) {
  HANDLE_TH_ERRORS
  group(self).startCoalescing();
  END_HANDLE_TH_ERRORS()
}

void* ProcessGroupNCCL_end_coalescing(void* self) {
  HANDLE_TH_ERRORS
  return work_handle(group(self).endCoalescing());
  END_HANDLE_TH_ERRORS(nullptr)
}

void* ProcessGroupNCCL_alltoall_base(void* self, void* output, void* input, int64_t asyncOp) {
  HANDLE_TH_ERRORS
  return work_handle(group(self).alltoall_base(unpack(output), unpack(input), asyncOp != 0));
  END_HANDLE_TH_ERRORS(nullptr)
}

// Work.wait: py::call_guard<py::gil_scoped_release>, then the virtual Work::wait.
int64_t Work_wait(void* self, int64_t timeoutMilliseconds) {
  HANDLE_TH_ERRORS
  return (*static_cast<WorkHandle*>(self))->wait(std::chrono::milliseconds(timeoutMilliseconds)) ? 1 : 0;
  END_HANDLE_TH_ERRORS(0)
}

int64_t Work_is_completed(void* self) {
  HANDLE_TH_ERRORS
  return (*static_cast<WorkHandle*>(self))->isCompleted() ? 1 : 0;
  END_HANDLE_TH_ERRORS(0)
}

void Work_delete(void* self) { delete static_cast<WorkHandle*>(self); }

#define TORCHLIKE_METHOD(name, signature) \
  { "c10d_" #name, signature, reinterpret_cast<void*>(&name) }
const torch::MethodDef methods[] = {
    TORCHLIKE_METHOD(FileStore_new, "p:sl"),
    TORCHLIKE_METHOD(PrefixStore_new, "p:sp"),
    TORCHLIKE_METHOD(Store_set_timeout, "v:pl"),
    TORCHLIKE_METHOD(Store_delete, "v:p"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_new, "p:plllpl"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_delete, "v:p"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_shutdown, "v:p"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_eager_connect_single_device, "v:pl"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_perform_nocolor_split, "v:pl"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_allreduce, "p:ppll"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_barrier, "p:pl"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_send, "p:ppl"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_recv, "p:ppl"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_start_coalescing, "v:p"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_end_coalescing, "p:p"),
    TORCHLIKE_METHOD(ProcessGroupNCCL_alltoall_base, "p:pppl"),
    TORCHLIKE_METHOD(Work_wait, "l:pl"),
    TORCHLIKE_METHOD(Work_is_completed, "l:p"),
    TORCHLIKE_METHOD(Work_delete, "v:p"),
    {nullptr, nullptr, nullptr},
};
#undef TORCHLIKE_METHOD
const torch::RegisterMethods register_c10d_methods(methods);

}  // namespace
}  // namespace torch::distributed::c10d
