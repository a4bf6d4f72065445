#pragma once
// The GPU's kernels by time, and what a kernel's name says of its math: whether it is a matrix
// multiply (GEMM) and in which precision, so that a job whose matmuls run in plain FP32 (no tensor
// cores) can be told to use autocast/bf16 or TF32. From a process's `gpu_activities` rows.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "store/run_database.hpp"

namespace trainshim::cli {

// The precision of a kernel's multiply-adds, as its name gives it. Fp32 is FP32 on the CUDA cores
// (SIMT: "sgemm"); Tf32 is FP32 data multiplied on tensor cores in TF32.
enum class KernelPrecision : uint8_t { Unknown, Fp64, Fp32, Tf32, Fp16, Bf16, Fp8, Int8 };

// "unknown", "fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8".
std::string_view kernel_precision_name(KernelPrecision p);

struct KernelKind {
  bool gemm = false;  // a matrix-matrix multiply (cuBLAS, cuBLASLt, CUTLASS, Triton matmul templates)
  KernelPrecision precision = KernelPrecision::Unknown;
  bool operator==(const KernelKind&) const = default;
};

// From the name alone, mangled (as CUPTI gives templated kernels) or demangled.
KernelKind classify_kernel(std::string_view name);

// A GEMM in FP32 on the CUDA cores: what autocast (bf16) or TF32 would move onto tensor cores.
inline bool is_fp32_gemm(const KernelKind& k) { return k.gemm && k.precision == KernelPrecision::Fp32; }

// The name as profilers show it: a mangled C++ name ("_Z...") demangled, any other name as it is.
std::string readable_kernel_name(std::string_view name);

// Busy time of one or more devices from activities fed in order of start: per device the union of
// their [start, end) spans. `on_gap` (optional) is called with each idle stretch between two busy
// spans of a device.
class GpuBusyUnion {
 public:
  struct Gap {
    int64_t device, start_ns, end_ns;
  };
  void add(int64_t device, int64_t start_ns, int64_t end_ns, std::vector<Gap>* gaps = nullptr);
  // Busy nanoseconds of every device so far, summed.
  int64_t busy_ns() const;

 private:
  struct Span {
    int64_t start_ns, end_ns;
  };
  std::map<int64_t, Span> open_;  // per device, the busy span still growing
  int64_t closed_ns_ = 0;
};

struct KernelTime {
  std::string name;  // readable_kernel_name
  int64_t count = 0, total_ns = 0;
  double share = 0;  // total_ns / KernelSummary::busy_ns
  KernelKind kind;
};

// The share of GPU busy time in FP32 GEMMs before the AMP finding (and the setup checklist's
// mixed_precision item) speaks up.
inline constexpr double kFp32GemmShare = 0.05;

struct KernelSummary {
  int64_t busy_ns = 0;          // GPU busy time: kernels, copies and memsets, GpuBusyUnion over devices
  int64_t kernel_ns = 0;        // every kernel's duration, summed (concurrent kernels each count)
  int64_t fp32_gemm_ns = 0;     // the FP32 GEMMs' durations, summed
  double fp32_gemm_share = 0;   // fp32_gemm_ns / busy_ns; 0 without busy time
  std::vector<KernelTime> top;  // the kernels with the most GPU time, most first (ties: by name)
  std::string top_fp32_gemm;    // the FP32 GEMM with the most GPU time (readable); empty: none ran
};

// The AMP finding in words, e.g. "38.0 % of GPU time in FP32 GEMMs (ampere_sgemm_128x64_tn the
// longest): use autocast with bf16, or TF32: ..."; empty when no FP32 GEMM ran.
std::string fp32_gemm_words(const KernelSummary& summary);

// A process's kernels (every row of its `gpu_activities`): the `limit` with the most time.
KernelSummary summarize_kernels(const RunDatabase& db, int64_t process_id, std::size_t limit = 10);

}  // namespace trainshim::cli
