#include "analyse/kernels.hpp"

#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <regex>
#include <unordered_map>

#include "store/rows.hpp"

namespace trainshim::cli {

namespace {

// What the vendors' names say, read from profiles of real jobs (tests/unit/test_kernels.cpp names
// each source). Matched on the lower-cased name, mangled or not: the identifiers that carry the
// meaning appear whole in both.

// Names with "gemm" that are not a matrix-matrix multiply: matrix-vector kernels (cuBLAS gemv2T_,
// gemvx) and convolutions computed as implicit GEMMs (cuDNN's implicit_convolve_sgemm,
// sm80_xmma_fprop_implicit_gemm_*, volta_scudnn_*), which the FP32-GEMM finding is not about.
const std::regex kNotGemm(R"(gemv|conv|fprop|dgrad|wgrad|cudnn)");
// cuBLAS/CUTLASS (..gemm..), cuBLASLt on Hopper and later (nvjet_*), Inductor's matmul templates
// (triton_tem_fused_mm_0, triton_tem_fused_addmm_relu_3: the fused ATen ops are in the name).
const std::regex kGemm(R"(gemm|nvjet_|^triton_tem_fused(_\w+)?_(mm|addmm|bmm|baddbmm)(_|$))");

struct PrecisionRule {
  std::regex pattern;
  KernelPrecision precision;
};

// The first rule that matches wins: a name also carries its accumulator's type (bf16 inputs with
// f32 accumulation: "bf16bf16_bf16f32_f32"), so the narrower input types come first, and FP32 is
// named only by markers of FP32 math (a bare "float" may be the accumulator).
const std::vector<PrecisionRule>& precision_rules() {
  static const std::vector<PrecisionRule> rules = [] {
    const std::pair<const char*, KernelPrecision> table[] = {
        // FP8: CUTLASS/cuBLAS element names; nvjet's type letters "qq" (FP8 A and B: nvjet_qqtst_, nvjet_qqhsh_).
        {R"(e4m3|e5m2|fp8|f8f6f4|nvjet_(sm\d+_)?qq)", KernelPrecision::Fp8},
        // INT8: tensor-core integer MMA (imma, i8816, i16832), s8/u8 elements, xmma i8i8.
        {R"(imma|int8|i8816|i16832|i8i8|(^|[^a-z0-9])[su]8([^a-z0-9]|$))", KernelPrecision::Int8},
        // BF16: nvjet's type letter t (nvjet_tst_, nvjet_tss_).
        {R"(bf16|bfloat16|nvjet_(sm\d+_)?t)", KernelPrecision::Bf16},
        // TF32: named (xmma f32f32_tf32f32, nvjet_sss_tf32), or CUTLASS 2's tensor-core 1688 GEMM on FP32
        // elements, which Ampere runs in TF32 (cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4).
        {R"(tf32|tensorop_s1688gemm_\d)", KernelPrecision::Tf32},
        // FP16: h884/h1688/h16816 MMA shapes, fp16/f16/half elements, nvjet's type letter h (nvjet_hsh_).
        {R"(fp16|f16|half|h884|h1688|h16816|hgemm|nvjet_(sm\d+_)?h)", KernelPrecision::Fp16},
        {R"(dgemm|d884|d16816|f64|double|nvjet_(sm\d+_)?d)", KernelPrecision::Fp64},
        // FP32 on the CUDA cores: cuBLAS's <arch>_sgemm_*, CUTLASS simt_sgemm, xmma f32f32_f32f32 (ffma),
        // cuBLAS's templated small-shape kernels (gemmSN_TN_kernel<float, ...>).
        {R"(sgemm|gemm_f32f32_f32|gemm\w*_kernel<float)", KernelPrecision::Fp32},
    };
    std::vector<PrecisionRule> out;
    for (const auto& [pattern, precision] : table) out.push_back({std::regex(pattern), precision});
    return out;
  }();
  return rules;
}

}  // namespace

std::string_view kernel_precision_name(KernelPrecision p) {
  switch (p) {
    case KernelPrecision::Fp64:
      return "fp64";
    case KernelPrecision::Fp32:
      return "fp32";
    case KernelPrecision::Tf32:
      return "tf32";
    case KernelPrecision::Fp16:
      return "fp16";
    case KernelPrecision::Bf16:
      return "bf16";
    case KernelPrecision::Fp8:
      return "fp8";
    case KernelPrecision::Int8:
      return "int8";
    case KernelPrecision::Unknown:
      break;
  }
  return "unknown";
}

KernelKind classify_kernel(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (!std::regex_search(lower, kGemm) || std::regex_search(lower, kNotGemm)) return {};
  for (const PrecisionRule& rule : precision_rules())
    if (std::regex_search(lower, rule.pattern)) return {true, rule.precision};
  return {true, KernelPrecision::Unknown};
}

std::string readable_kernel_name(std::string_view name) {
  if (!name.starts_with("_Z")) return std::string(name);
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(std::string(name).c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(name);
}

void GpuBusyUnion::add(int64_t device, int64_t start_ns, int64_t end_ns, std::vector<Gap>* gaps) {
  end_ns = std::max(start_ns, end_ns);
  auto [it, fresh] = open_.try_emplace(device, Span{start_ns, end_ns});
  if (fresh) return;
  Span& span = it->second;
  if (start_ns <= span.end_ns) {
    span.end_ns = std::max(span.end_ns, end_ns);
    return;
  }
  if (gaps) gaps->push_back({device, span.end_ns, start_ns});
  closed_ns_ += span.end_ns - span.start_ns;
  span = {start_ns, end_ns};
}

int64_t GpuBusyUnion::busy_ns() const {
  int64_t total = closed_ns_;
  for (const auto& [device, span] : open_) total += span.end_ns - span.start_ns;
  return total;
}

KernelSummary summarize_kernels(const RunDatabase& db, int64_t process_id, std::size_t limit) {
  KernelSummary summary;
  {
    GpuBusyUnion busy;
    for (const GpuIntervalRow& a : read_gpu_intervals(db, process_id)) busy.add(a.device, a.start_ns, a.end_ns);
    summary.busy_ns = busy.busy_ns();
  }

  // Grouped by the name's text: a name published twice (a collector that replaced a dead one)
  // is one kernel.
  std::unordered_map<std::string, KernelTime> kernels;
  for (const KernelTotalRow& row : read_kernel_totals(db, process_id)) {
    KernelTime& k = kernels[row.name];
    if (k.count == 0) {
      k.name = row.name.empty() ? "(unnamed kernel)" : readable_kernel_name(row.name);
      k.kind = classify_kernel(row.name);
    }
    k.count += row.launches;
    k.total_ns += row.total_ns;
  }
  std::vector<KernelTime> all;
  all.reserve(kernels.size());
  for (auto& [raw, k] : kernels) {
    summary.kernel_ns += k.total_ns;
    if (is_fp32_gemm(k.kind)) summary.fp32_gemm_ns += k.total_ns;
    if (summary.busy_ns > 0) k.share = double(k.total_ns) / double(summary.busy_ns);
    all.push_back(std::move(k));
  }
  if (summary.busy_ns > 0) summary.fp32_gemm_share = double(summary.fp32_gemm_ns) / double(summary.busy_ns);
  std::sort(all.begin(), all.end(), [](const KernelTime& a, const KernelTime& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  for (const KernelTime& k : all)
    if (is_fp32_gemm(k.kind)) {
      summary.top_fp32_gemm = k.name;
      break;
    }
  if (all.size() > limit) all.resize(limit);
  summary.top = std::move(all);
  return summary;
}

std::string fp32_gemm_words(const KernelSummary& summary) {
  if (summary.top_fp32_gemm.empty()) return {};
  // bf16 and TF32 tensor cores came with Ampere; before it, fp16 is the one tensor-core type.
  return fmt::format("{:.1f} % of GPU time in FP32 GEMMs ({} the longest): use autocast with bf16 "
                     "(torch.autocast('cuda', dtype=torch.bfloat16); fp16 with a GradScaler before Ampere), or TF32 "
                     "for the FP32 matmuls: torch.backends.cuda.matmul.allow_tf32 = True / "
                     "torch.set_float32_matmul_precision('high')",
                     100 * summary.fp32_gemm_share, summary.top_fp32_gemm);
}

}  // namespace trainshim::cli
