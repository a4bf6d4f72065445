// Scenarios that keep the rows of the reliability review's "What held up" table held, run on the
// stub runtime (tests/bench/stub: every call returns at once, so the shim and the collector are
// what is hammered). One mode per row:
//   hammer N T     T threads, each N x (cudaMemcpyAsync from pageable memory + cudaStreamSynchronize)
//                  ("64 threads x 2000 x ...", "Producer SIGKILL at random times")
//   segments       one call, then lists this process's segments ("Segment creation")
//   inert          no CUDA call; threads, open descriptors and segments ("Inertness")
//   signal K       K signals into a malloc-churning thread, each handler syncs ("CUDA call from a signal handler")
//   fork F         F forks while 4 threads hammer; each child 10 x (copy + sync) ("fork without exec")
//   exec D         D calls, then execs itself with D-1 until 1 ("exec chain of 4 images")
//   jit            a sync from code without unwind info and data in rbp ("Unwinding through code without unwind info")
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" int call_from_jit(unsigned long garbage);
// What JIT-generated or hand-written code looks like to an unwinder: no CFI, and rbp holds data.
__asm__(".text\n.globl call_from_jit\n.type call_from_jit,@function\ncall_from_jit:\n"
        "  push %rbp\n"
        "  mov %rdi, %rbp\n"
        "  xor %edi, %edi\n"
        "  call cudaStreamSynchronize@PLT\n"
        "  pop %rbp\n"
        "  ret\n"
        ".size call_from_jit, .-call_from_jit\n");

namespace {

char g_device[64];

int copy_and_sync() {
  char host[64] = {};
  if (cudaMemcpyAsync(g_device, host, sizeof host, cudaMemcpyHostToDevice, nullptr) != cudaSuccess) return 1;
  return cudaStreamSynchronize(nullptr) == cudaSuccess ? 0 : 1;
}

int hammer(int n, int threads) {
  std::vector<pthread_t> workers(threads);
  for (auto& t : workers)
    pthread_create(
        &t, nullptr,
        [](void* arg) -> void* {
          const int times = *static_cast<int*>(arg);
          for (int i = 0; i < times; ++i)
            if (copy_and_sync() != 0) std::abort();
          return nullptr;
        },
        &n);
  for (auto& t : workers) pthread_join(t, nullptr);
  std::printf("done %d x %d\n", threads, n);
  return 0;
}

// Entries of /dev/shm whose name ends in "-<pid>" or "-<pid>.<n>": this process's segments.
std::vector<std::string> own_segments() {
  std::vector<std::string> names;
  // Appended, not `"-" + std::string`: GCC 12 warns falsely (-Wrestrict) on that in Release.
  std::string pid = "-";
  pid += std::to_string(getpid());
  DIR* dir = opendir("/dev/shm");
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    const auto at = name.rfind(pid);
    if (at == std::string::npos) continue;
    const std::string rest = name.substr(at + pid.size());
    if (rest.empty() || (rest[0] == '.' && rest.find_first_not_of("0123456789", 1) == std::string::npos))
      names.push_back(name);
  }
  closedir(dir);
  return names;
}

int segments() {
  if (copy_and_sync() != 0) return 1;
  for (const std::string& name : own_segments()) {
    struct stat st {};
    if (lstat(("/dev/shm/" + name).c_str(), &st) != 0) return 1;
    std::printf("%s mode=%o size=%lld uid=%u link=%d\n", name.c_str(), unsigned(st.st_mode & 07777),
                static_cast<long long>(st.st_size), unsigned(st.st_uid), S_ISLNK(st.st_mode) ? 1 : 0);
  }
  return 0;
}

int count_entries(const char* path, bool skip_standard_fds) {
  int n = 0;
  DIR* dir = opendir(path);
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    if (skip_standard_fds && (std::atoi(e->d_name) <= 2 || std::atoi(e->d_name) == dirfd(dir))) continue;
    ++n;
  }
  closedir(dir);
  return n;
}

int inert() {
  std::printf("threads=%d extra_fds=%d segments=%zu\n", count_entries("/proc/self/task", false),
              count_entries("/proc/self/fd", true), own_segments().size());
  return 0;
}

std::atomic<long> g_handled{0};
std::atomic<bool> g_stop{false};

void on_signal(int) {
  cudaStreamSynchronize(nullptr);
  g_handled.fetch_add(1);
}

// Only malloc and free: every signal lands in application code, never inside a hooked call.
void* churn(void*) {
  long i = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    void* p = std::malloc(64 + (i++ % 4096));
    std::free(p);
  }
  return nullptr;
}

// A real-time signal: queued, so none is merged into another and every one is handled; sent in
// batches, so the churning thread takes them wherever it happens to be. Its handler is not
// re-entered (the signal is blocked while it runs).
int signals(long count) {
  if (copy_and_sync() != 0) return 1;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGRTMIN, &action, nullptr);
  pthread_t thread;
  pthread_create(&thread, nullptr, churn, nullptr);
  for (long sent = 0; sent < count;) {
    for (int batch = 0; batch < 64 && sent < count; ++batch, ++sent)
      if (pthread_sigqueue(thread, SIGRTMIN, sigval{}) != 0) return 1;
    while (g_handled.load() < sent) sched_yield();
  }
  g_stop = true;
  pthread_join(thread, nullptr);
  std::printf("handled=%ld\n", g_handled.load());
  return 0;
}

std::atomic<long> g_helper_calls{0};

void* helper(void*) {
  while (!g_stop.load(std::memory_order_relaxed)) {
    if (copy_and_sync() != 0) std::abort();
    g_helper_calls.fetch_add(2, std::memory_order_relaxed);
  }
  return nullptr;
}

int forks(int count) {
  if (copy_and_sync() != 0) return 1;
  pthread_t helpers[4];
  for (auto& t : helpers) pthread_create(&t, nullptr, helper, nullptr);
  int clean = 0;
  for (int n = 0; n < count; ++n) {
    const pid_t child = fork();
    if (child == 0) {
      for (int i = 0; i < 10; ++i)
        if (copy_and_sync() != 0) _exit(1);
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    clean += WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  g_stop = true;
  for (auto& t : helpers) pthread_join(t, nullptr);
  std::printf("clean_children=%d parent_calls=%ld pid=%d\n", clean, g_helper_calls.load() + 2, getpid());
  return 0;
}

int exec_chain(int depth) {
  for (int i = 0; i < depth; ++i)
    if (cudaMemcpyAsync(g_device, g_device, 1, cudaMemcpyHostToDevice, nullptr) != cudaSuccess) return 1;
  if (cudaStreamSynchronize(nullptr) != cudaSuccess) return 1;
  if (depth == 1) {
    std::printf("pid=%d\n", getpid());
    return 0;
  }
  std::fflush(stdout);
  const std::string next = std::to_string(depth - 1);
  execl("/proc/self/exe", "held_prog", "exec", next.c_str(), static_cast<char*>(nullptr));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const long arg = argc > 2 ? std::atol(argv[2]) : 0;
  if (mode == "hammer" && argc > 3) return hammer(int(arg), std::atoi(argv[3]));
  if (mode == "segments") return segments();
  if (mode == "inert") return inert();
  if (mode == "signal") return signals(arg);
  if (mode == "fork") return forks(int(arg));
  if (mode == "exec") return exec_chain(int(arg));
  if (mode == "jit") {
    std::printf("rc=%d\n", call_from_jit(0xdeadbeefcafeUL));
    return 0;
  }
  std::fprintf(stderr, "usage: %s hammer N T|segments|inert|signal K|fork F|exec D|jit\n", argv[0]);
  return 2;
}
