// Kernel names classified (GEMM or not, precision), the GPU's busy time as a union per device, and a
// process's top kernels read from `gpu_activities`.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analyse/kernels.hpp"
#include "database.hpp"
#include "gpu_rows.hpp"
#include "run_fixtures.hpp"
#include "store/run_database.hpp"
#include "temp_dir.hpp"

namespace trainshim::cli {
namespace {

using P = KernelPrecision;

struct Case {
  const char* name;
  bool gemm;
  KernelPrecision precision;
};

// Every name is one a profiler printed for a real job. Sources:
//  [nsys-ai] GindaChen/nsys-ai PR #582, tests/test_tc_heuristics: "Names are real, from vendor
//            libraries" (H100/H200 captures).
//  [forum]   forums.developer.nvidia.com, "Switch from sm90_xmma_gemm.._cublas / void
//            cutlass::Kernel<cutlass_80_tensorop_..> kernels with CUDA-12.1 to nvjet_tst... kernels
//            with CUDA-12.8" (PyTorch on H100 NVL).
//  [nsys]    `nsys stats` cuda_gpu_kern_sum tables and torch.profiler key_averages() tables pasted in
//            public GitHub reports and issues (PyTorch training and vLLM/SGLang serving, A100/H100/B200).
//  [inductor] PyTorch test/inductor test_profiler ("triton_tem_fused_mm_0") and Inductor output code.
//  [h200]    CUPTI's names in trainshim's own runs of tests/realtorch (R3, R4) and gpu_timeline_torch.py
//            (fp32, bf16) on an H200 with torch 2.11.0+cu130 (scripts/gpu-check).
const Case kCases[] = {
    // FP32 on the CUDA cores: the AMP finding.
    {"ampere_sgemm_128x64_tn", true, P::Fp32},           // [nsys] A100, nn.Linear fp32
    {"ampere_sgemm_32x128_tn", true, P::Fp32},           // [nsys] torch.profiler table
    {"ampere_sgemm_64x32_sliced1x4_tn", true, P::Fp32},  // [nsys] "FP32 GEMM TF32=OFF"
    {"volta_sgemm_128x64_nn", true, P::Fp32},            // [nsys-ai]
    {"sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
     "kernel__5x_cublas",
     true, P::Fp32},                                                            // [nsys] H100, "Ampere f32 fallback"
    {"sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8", true, P::Fp32},  // [nsys-ai]
    {"void gemmSN_TN_kernel<float, (int)128, (int)16, (", true, P::Fp32},       // [nsys] cut as the table printed it
    {"sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize64x128x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_"
     "kernel__5x_cublas",
     true, P::Fp32},  // [h200] R3's nn.Linear, fp32
    {"sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_"
     "kernel__5x_cublas",
     true, P::Fp32},  // [h200] torch.mm, fp32
    {"void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_"
     "align1::Params)",
     true, P::Fp32},  // [h200] R3's backward, fp32
    // TF32 on tensor cores (allow_tf32 / set_float32_matmul_precision('high')).
    {"sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
     "cublas",
     true, P::Tf32},  // [nsys] H100 forward pass
    {"void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_"
     "128x128_32x3_nn_align4::Params)",
     true, P::Tf32},                                // [nsys] "FP32 GEMM TF32=ON ... Tensor Cores"
    {"nvjet_sss_tf32_128x256_TNT", true, P::Tf32},  // [nsys] Hopper, TF32 path
    // BF16.
    {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
     "5x_cublas",
     true, P::Bf16},                                                    // [nsys] vLLM lm_head
    {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn", true, P::Bf16},          // [nsys-ai]
    {"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", true, P::Bf16},       // [nsys] aten::mm on c10::BFloat16
    {"nvjet_tst_32x64_64x16_4x1_v_bz_TNN", true, P::Bf16},              // [nsys] Input type c10::BFloat16
    {"nvjet_tst_128x128_64x4_1x2_h_bz_coopA", true, P::Bf16},           // [nsys-ai]
    {"nvjet_tss_64x8_64x16_2x1_v_bz_splitK_TNT", true, P::Bf16},        // [nsys] bf16 in, fp32 out
    {"nvjet_sm90_tst_128x128_64x6_1x2_h_bz_NTT", true, P::Bf16},        // [h200] R4's nn.Linear under autocast
    {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", true, P::Bf16},  // [h200] torch.mm under autocast
    {"void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(T1::Params)", true,
     P::Bf16},                                                                      // [nsys] "CUTLASS BF16 GEMM"
    {"cutlass_75_tensorop_bf16_s1688gemm_bf16_16x16_tn_align1", true, P::Bf16},     // [nsys]
    {"void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm>", true, P::Bf16},  // [nsys-ai]
    // As CUPTI gives a templated kernel: mangled.
    {"_ZN7cutlass7Kernel2I56cutlass_80_tensorop_s16816gemm_bf16_64x64_64x6_tn_align8EEvNT_6ParamsE", true,
     P::Bf16},  // [nsys] vLLM kernel filter
    // FP16.
    {"nvjet_hsh_96x128_64x7_2x1_v_bz_TNN", true, P::Fp16},   // [nsys] flashinfer decode, __half
    {"nvjet_hsh_256x128_64x4_2x1_v_bz_TNN", true, P::Fp16},  // [nsys-ai]
    {"nvjet_sm90_hss_320x128", true, P::Fp16},               // [nsys-ai] "of an H100's dense FP16 peak"
    // FP8.
    {"nvjet_qqtst_128x256_128x6_2x1_2cta_v_bz_TNT", true, P::Fp8},         // [nsys] cuBLASLt fp8 (_scaled_mm)
    {"nvjet_qqtst_112x128_128x7_2x1_v_bz_coopA_algo2_TNN", true, P::Fp8},  // [nsys]
    {"sm90_fp8_gemm_1d2d_impl", true, P::Fp8},                             // [nsys] DeepGEMM in SGLang
    // Inductor's matmul templates: a GEMM; the name does not say the precision.
    {"triton_tem_fused_mm_0", true, P::Unknown},        // [inductor]
    {"triton_tem_fused_mm_relu_0", true, P::Unknown},   // [inductor] output code
    {"triton_tem_fused_clone_mm_8", true, P::Unknown},  // [nsys]
    // Not a GEMM: elementwise, reductions, attention, collectives, convolutions, cuBLAS's split-K reduce.
    {"implicit_convolve_sgemm", false, P::Unknown},                  // [nsys-ai] cuDNN convolution
    {"vectorized_elementwise_kernel", false, P::Unknown},            // [nsys-ai]
    {"ncclDevKernel_AllReduce_Sum_f32_RING_LL", false, P::Unknown},  // [nsys-ai]
    {"flash_fwd_splitkv_kernel", false, P::Unknown},                 // [nsys-ai]
    {"triton_poi_fused_mul_silu_2", false, P::Unknown},              // [nsys] vLLM
    {"triton_red_fused_argmax_1", false, P::Unknown},                // [nsys] Inductor
    {"splitKreduce_kernel", false, P::Unknown},                      // [nsys]
    {"void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, "
     "false, false, false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*, float*, float "
     "const*, float const*, float const*, float const*, float*, void*, long, float*, int*)",
     false, P::Unknown},  // [h200] R3's backward; parameter list completed after the cut
    {"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, "
     "std::array<char *, (unsigned long)2>>(int, at::native::CUDAFunctorOnSelf_add<float>, "
     "std::array<char *, (unsigned long)2>)",
     false, P::Unknown},  // [nsys] cut short there; completed with its parameter list
};

TEST(Kernels, RealNamesAreClassifiedByTheirFamilyAndPrecision) {
  for (const Case& c : kCases) {
    const KernelKind kind = classify_kernel(c.name);
    EXPECT_EQ(kind.gemm, c.gemm) << c.name;
    EXPECT_EQ(kernel_precision_name(kind.precision), kernel_precision_name(c.precision)) << c.name;
    EXPECT_EQ(is_fp32_gemm(kind), c.gemm && c.precision == P::Fp32) << c.name;
  }
}

TEST(Kernels, PrecisionNames) {
  EXPECT_EQ(kernel_precision_name(P::Fp32), "fp32");
  EXPECT_EQ(kernel_precision_name(P::Tf32), "tf32");
  EXPECT_EQ(kernel_precision_name(P::Bf16), "bf16");
  EXPECT_EQ(kernel_precision_name(P::Fp16), "fp16");
  EXPECT_EQ(kernel_precision_name(P::Fp8), "fp8");
  EXPECT_EQ(kernel_precision_name(P::Int8), "int8");
  EXPECT_EQ(kernel_precision_name(P::Fp64), "fp64");
  EXPECT_EQ(kernel_precision_name(P::Unknown), "unknown");
}

TEST(Kernels, MangledNamesAreShownDemangled) {
  EXPECT_EQ(readable_kernel_name("_ZN7cutlass7Kernel2I56cutlass_80_tensorop_s16816gemm_bf16_64x64_64x6_tn_align8EEvNT_"
                                 "6ParamsE"),
            "void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_bf16_64x64_64x6_tn_align8>(cutlass_80_tensorop_"
            "s16816gemm_bf16_64x64_64x6_tn_align8::Params)");
  EXPECT_EQ(readable_kernel_name("ampere_sgemm_128x64_tn"), "ampere_sgemm_128x64_tn");
  EXPECT_EQ(readable_kernel_name("_Znot a mangled name"), "_Znot a mangled name");
}

TEST(Kernels, BusyTimeIsTheUnionPerDeviceAndGapsAreBetweenItsSpans) {
  GpuBusyUnion busy;
  std::vector<GpuBusyUnion::Gap> gaps;
  busy.add(0, 100, 200, &gaps);
  busy.add(1, 120, 180, &gaps);  // another device: not a gap of device 0, and counted again
  busy.add(0, 150, 300, &gaps);  // overlaps: extends
  busy.add(0, 300, 310, &gaps);  // touches: extends
  busy.add(0, 400, 450, &gaps);  // a gap of 90
  busy.add(0, 410, 420, &gaps);  // inside
  busy.add(1, 1000, 1001, &gaps);
  EXPECT_EQ(busy.busy_ns(), (310 - 100) + (450 - 400) + (180 - 120) + 1);
  ASSERT_EQ(gaps.size(), 2u);
  EXPECT_EQ(gaps[0].device, 0);
  EXPECT_EQ(gaps[0].start_ns, 310);
  EXPECT_EQ(gaps[0].end_ns, 400);
  EXPECT_EQ(gaps[1].device, 1);
  EXPECT_EQ(gaps[1].start_ns, 180);
  EXPECT_EQ(gaps[1].end_ns, 1000);
}

class KernelSummaryTest : public test::TempDirTest {
 protected:
  const std::string path_ = dir_ + "/trainshim-unitjob.db";
};

TEST_F(KernelSummaryTest, TopKernelsAndTheShareOfFp32Gemms) {
  const std::string sgemm = "ampere_sgemm_128x64_tn", bf16 = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT";
  int64_t p = 0, other = 0;
  {
    collector::Database db(path_, "unitjob");
    p = db.add_process("seg-100", *test::header_for(0, 100, "nodeA"));
    other = db.add_process("seg-101", *test::header_for(1, 101, "nodeA"));
    test::Records records(db);
    test::add_gpu_rows(
        db, records, p,
        {
            {.start_ns = 1000, .end_ns = 5000, .stream = 7, .name = sgemm},
            {.start_ns = 4000, .end_ns = 7000, .stream = 8, .name = bf16},
            {.start_ns = 6000, .end_ns = 9000, .stream = 7, .name = sgemm},
            {.api = Api::gpuMemcpy,
             .start_ns = 20000,
             .end_ns = 22000,
             .stream = 7,
             .bytes = 4096,
             .direction = Direction::HostToDevice,
             .host_memory = HostMemory::Pageable},
            {.start_ns = 1000, .end_ns = 2000, .device = 1, .stream = 9, .name = "triton_poi_fused_mul_silu_2"},
            {.api = Api::gpuMemset, .start_ns = 2000, .end_ns = 2500, .device = 1, .stream = 9, .bytes = 64},
        });
    test::add_gpu_rows(db, records, other, {{.start_ns = 0, .end_ns = 1'000'000, .name = sgemm}});
    records.store();
    db.commit();
  }

  RunDatabase db(path_);
  const KernelSummary s = summarize_kernels(db, p, 2);
  // Device 0: [1000, 9000) and [20000, 22000); device 1: [1000, 2500).
  EXPECT_EQ(s.busy_ns, 8000 + 2000 + 1500);
  EXPECT_EQ(s.kernel_ns, 4000 + 3000 + 3000 + 1000);
  EXPECT_EQ(s.fp32_gemm_ns, 7000);
  EXPECT_DOUBLE_EQ(s.fp32_gemm_share, 7000.0 / 11500.0);
  ASSERT_EQ(s.top.size(), 2u);
  EXPECT_EQ(s.top[0].name, sgemm);
  EXPECT_EQ(s.top[0].count, 2);
  EXPECT_EQ(s.top[0].total_ns, 7000);
  EXPECT_DOUBLE_EQ(s.top[0].share, 7000.0 / 11500.0);
  EXPECT_TRUE(is_fp32_gemm(s.top[0].kind));
  EXPECT_EQ(s.top[1].name, bf16);
  EXPECT_EQ(s.top[1].count, 1);
  EXPECT_EQ(s.top[1].total_ns, 3000);
  EXPECT_EQ(s.top[1].kind, (KernelKind{true, P::Bf16}));

  EXPECT_EQ(s.top_fp32_gemm, sgemm);
  EXPECT_EQ(fp32_gemm_words(s),
            "60.9 % of GPU time in FP32 GEMMs (ampere_sgemm_128x64_tn the longest): use autocast with bf16 "
            "(torch.autocast('cuda', dtype=torch.bfloat16); fp16 with a GradScaler before Ampere), or TF32 for the "
            "FP32 matmuls: torch.backends.cuda.matmul.allow_tf32 = True / torch.set_float32_matmul_precision('high')");

  const KernelSummary all = summarize_kernels(db, p);
  ASSERT_EQ(all.top.size(), 3u);
  EXPECT_EQ(all.top[2].name, "triton_poi_fused_mul_silu_2");
  EXPECT_FALSE(all.top[2].kind.gemm);
}

// Without FP32 GEMMs there is no share to report; without activity nothing is divided by zero.
TEST_F(KernelSummaryTest, Bf16GemmsOnlyAndNoActivity) {
  int64_t p = 0, idle = 0;
  {
    collector::Database db(path_, "unitjob");
    p = db.add_process("seg-100", *test::header_for(0, 100, "nodeA"));
    idle = db.add_process("seg-101", *test::header_for(1, 101, "nodeA"));
    test::Records records(db);
    test::add_gpu_rows(db, records, p,
                       {{.start_ns = 0, .end_ns = 500, .name = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn"},
                        {.start_ns = 500, .end_ns = 800, .name = "nvjet_sss_tf32_128x256_TNT"}});
    records.store();
    db.commit();
  }
  RunDatabase db(path_);
  const KernelSummary s = summarize_kernels(db, p);
  EXPECT_EQ(s.busy_ns, 800);
  EXPECT_EQ(s.fp32_gemm_ns, 0);
  EXPECT_EQ(s.fp32_gemm_share, 0.0);
  EXPECT_EQ(s.top_fp32_gemm, "");
  EXPECT_EQ(fp32_gemm_words(s), "");
  ASSERT_EQ(s.top.size(), 2u);
  EXPECT_EQ(s.top[0].kind, (KernelKind{true, P::Bf16}));
  EXPECT_EQ(s.top[1].kind, (KernelKind{true, P::Tf32}));

  const KernelSummary none = summarize_kernels(db, idle);
  EXPECT_EQ(none.busy_ns, 0);
  EXPECT_EQ(none.fp32_gemm_share, 0.0);
  EXPECT_TRUE(none.top.empty());
}

}  // namespace
}  // namespace trainshim::cli
