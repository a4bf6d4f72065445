// The PyTorch stand-in (tests/torchlike) under trainshim: each torch op runs at a marked line of
// a small script, and the report must show torch's own native call chain for it (binding,
// at::_ops::<op>::call, the native kernel, outermost to innermost), the operation name, and the
// CUDA calls with the host-memory kinds real torch uses.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "harness.hpp"

namespace trainshim::test {
namespace {

using nlohmann::json;

constexpr int kSteps = 3;

struct Copies {
  const char* direction;
  const char* memory;
  int calls;
};

struct OpCase {
  const char* name;
  const char* setup;  // lines of main() before the loop (4-space indent)
  const char* op;     // the marked line, run kSteps times
  const char* list;   // where its site is: hidden_syncs, explicit_syncs, polls; "" for no sync at all
  const char* operation;
  int syncs_per_step;
  std::vector<const char*> chain;  // native frames, outermost to innermost (substrings)
  std::vector<Copies> copies;      // the run's whole copies table
  int synced_copies;               // copies followed at once by cudaStreamSynchronize on their stream
};

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> all = {
      {"item",
       "    y = torch.randn(256, device='cuda').sum()\n",
       "y.item()",
       "hidden_syncs",
       "Tensor.item()",
       1,
       {"THPVariable_item", "at::_ops::item::call", "at::native::item(", "at::_ops::_local_scalar_dense::call",
        "wrapper_CUDA___local_scalar_dense", "at::native::_local_scalar_dense_cuda"},
       {{"d2h", "pinned", kSteps}},
       kSteps},
      {"bool",
       "    y = torch.randn(256, device='cuda').sum()\n",
       "bool(y > 0)",
       "hidden_syncs",
       "bool(tensor) / if tensor:",
       1,
       {"THPVariable_bool_scalar", "THPVariable_is_nonzero", "at::_ops::is_nonzero::call", "at::native::is_nonzero",
        "at::_ops::item::call", "at::native::_local_scalar_dense_cuda"},
       {{"d2h", "pinned", kSteps}},
       kSteps},
      {"cpu",
       "    x = torch.randn(256, device='cuda')\n",
       "x.cpu()",
       "hidden_syncs",
       "Tensor.cpu() / .to('cpu')",
       1,
       {"THPVariable_cpu", "at::_ops::to_dtype_layout::call", "at::native::to(", "at::_ops::_to_copy::call",
        "at::native::_to_copy", "at::_ops::copy_::call", "at::native::copy_", "copy_kernel_cuda"},
       {{"d2h", "pageable", kSteps}},
       kSteps},
      {"upload",
       "    h = torch.randn(256)\n",
       "h.to('cuda')",
       "hidden_syncs",
       "Tensor.to('cuda') / .cuda() (blocking upload)",
       1,
       {"THPVariable_to", "at::_ops::to_device::call", "at::_ops::_to_copy::call", "at::native::_to_copy",
        "at::_ops::copy_::call", "copy_kernel_cuda"},
       {{"h2d", "pageable", kSteps}},
       kSteps},
      {"upload_pinned_async",
       "    p = torch.randn(256).pin_memory()\n",
       "p.to('cuda', non_blocking=True)",
       "",
       "",
       0,
       {},
       {{"h2d", "pinned", kSteps}},
       0},
      {"download_async",
       "    x = torch.randn(256, device='cuda')\n",
       "x.to('cpu', non_blocking=True)",
       "",
       "",
       0,
       {},
       {{"d2h", "pinned", kSteps}},
       0},
      {"nonzero",
       "    m = torch.randn(256, device='cuda') > 0\n",
       "m.nonzero()",
       "hidden_syncs",
       "nonzero() / boolean-mask indexing",
       1,
       {"THPVariable_nonzero", "at::_ops::nonzero::call", "wrapper_CUDA__nonzero", "at::native::nonzero_cuda",
        "at::native::nonzero_out_cuda", "nonzero_cuda_out_impl"},
       {{"d2h", "pinned", kSteps}},
       kSteps},
      {"mask_index",
       "    x = torch.randn(256, device='cuda')\n    m = x > 0\n",
       "x[m]",
       "hidden_syncs",
       "nonzero() / boolean-mask indexing",
       1,
       {"THPVariable_getitem", "at::_ops::index_Tensor::call", "wrapper_CUDA_index_Tensor", "at::native::index_out",
        "structured_index_Tensor::meta", "make_info", "expandTensors", "at::_ops::nonzero::call",
        "at::native::nonzero_cuda"},
       {{"d2h", "pinned", kSteps}},
       kSteps},
      {"masked_select",
       "    x = torch.randn(256, device='cuda')\n    m = x > 0\n",
       "torch.masked_select(x, m)",
       "hidden_syncs",
       "masked_select()",
       1,
       {"THPVariable_masked_select", "at::_ops::masked_select::call", "wrapper_CUDA__masked_select",
        "at::native::masked_select_cuda", "masked_select_out_cuda_impl", "at::native::index_out",
        "at::_ops::nonzero::call", "at::native::nonzero_cuda"},
       {{"d2h", "pinned", kSteps}},
       kSteps},
      {"unique",
       "    r = torch.randint(0, 50, (1024,), device='cuda')\n",
       "torch.unique(r)",
       "hidden_syncs",
       "torch.unique()",
       1,
       {"THPVariable__unique2", "at::_ops::_unique2::call", "wrapper_CUDA___unique2", "at::native::_unique2_cuda",
        "unique_cuda_template<long>", "UniqueCub<long>::operator()", "compute_unique<long>", "at::_ops::item::call",
        "at::native::_local_scalar_dense_cuda"},
       {{"d2h", "pinned", kSteps}},
       kSteps},
      {"unique_bool",
       "    m = torch.randn(256, device='cuda') > 0\n",
       "torch.unique(m)",
       "hidden_syncs",
       "torch.unique()",
       1,
       {"THPVariable__unique2", "at::_ops::_unique2::call", "at::native::_unique2_cuda", "unique_cuda_template<bool>",
        "UniqueCub<bool>::operator()"},
       {{"d2h", "pageable", kSteps}},
       kSteps},
      {"repeat_interleave",
       "    rep = torch.arange(4, device='cuda')\n",
       "torch.repeat_interleave(rep)",
       "hidden_syncs",
       "torch.repeat_interleave()",
       2,
       {"THPVariable_repeat_interleave", "at::_ops::repeat_interleave_Tensor::call",
        "wrapper_CUDA_Tensor_repeat_interleave", "at::native::repeat_interleave_cuda", "repeat_interleave_common",
        "at::_ops::item::call", "at::native::_local_scalar_dense_cuda"},
       {{"d2h", "pinned", 2 * kSteps}},
       2 * kSteps},
      {"equal",
       "    x = torch.randn(256, device='cuda')\n    x2 = x.clone()\n",
       "torch.equal(x, x2)",
       "hidden_syncs",
       "torch.equal()",
       1,
       {"THPVariable_equal", "at::_ops::equal::call", "wrapper_CUDA__equal", "at::native::cuda_equal",
        "at::_ops::item::call", "at::native::_local_scalar_dense_cuda"},
       {{"d2d", "device", 1}, {"d2h", "pinned", kSteps}},
       kSteps},
      {"bincount",
       "    r = torch.randint(0, 50, (1024,), device='cuda')\n",
       "torch.bincount(r)",
       "hidden_syncs",
       "torch.bincount()",
       2,
       {"THPVariable_bincount", "at::_ops::bincount::call", "wrapper_CUDA__bincount", "at::native::_bincount_cuda",
        "_bincount_cuda_template"},
       {{"d2h", "pageable", kSteps}, {"d2h", "pinned", kSteps}},
       2 * kSteps},
      {"histc",
       "    x = torch.randn(256, device='cuda')\n",
       "torch.histc(x, bins=10)",
       "hidden_syncs",
       "torch.histc()",
       2,
       {"THPVariable_histc", "at::_ops::histc::call", "wrapper_CUDA__histc", "at::native::_histc_cuda",
        "_histc_cuda_template", "at::_ops::to_dtype_layout::call", "copy_kernel_cuda"},
       {{"d2h", "pageable", 2 * kSteps}},
       2 * kSteps},
      {"tolist",
       "    x = torch.randn(8, device='cuda')\n",
       "x.tolist()",
       "hidden_syncs",
       "Tensor.tolist()",
       1,
       {"THPVariable_tolist", "torch::utils::tensor_to_list", "at::_ops::to_dtype_layout::call",
        "at::_ops::_to_copy::call", "copy_kernel_cuda"},
       {{"d2h", "pageable", kSteps}},
       kSteps},
      // _Formatter: masked_select, one bool (1.5 is not an integer), three bools of the range
      // checks, four formatted items, then tolist() for the values: 10 syncs per print.
      {"print",
       "    v = torch.arange(4, device='cuda') * 1.0 + 1.5\n",
       "print(v, file=sys.stderr)",
       "hidden_syncs",
       "print/repr of a CUDA tensor",
       10,
       {},
       {{"d2h", "pinned", 9 * kSteps}, {"d2h", "pageable", kSteps}},
       10 * kSteps},
      {"synchronize",
       "    torch.randn(256, device='cuda')\n",
       "torch.cuda.synchronize()",
       "explicit_syncs",
       "torch.cuda.synchronize()",
       1,
       {"THCPModule_cudaSynchronize", "c10::cuda::device_synchronize"},
       {},
       0},
      {"stream_synchronize",
       "    s = torch.cuda.current_stream()\n",
       "s.synchronize()",
       "explicit_syncs",
       "torch.cuda.Stream.synchronize()",
       1,
       {"THCPStream_synchronize", "c10::cuda::CUDAStream::synchronize"},
       {},
       0},
      {"event_synchronize",
       "    ev = torch.cuda.Event()\n",
       "ev.record(); ev.synchronize()",
       "explicit_syncs",
       "torch.cuda.Event.synchronize()",
       1,
       {"THCPEvent_synchronize"},
       {},
       0},
      {"stream_query",
       "    s = torch.cuda.current_stream()\n",
       "s.query()",
       "polls",
       "torch.cuda.Stream.query()",
       1,
       {"THCPStream_query", "c10::cuda::CUDAStream::query"},
       {},
       0},
      {"empty_cache",
       "    side = torch.cuda.Stream()\n",
       "t = torch.empty(1 << 16, device='cuda'); t.record_stream(side); del t; torch.cuda.empty_cache()",
       "hidden_syncs",
       "torch.cuda.empty_cache()",
       2,
       {"THCPModule_emptyCache", "NativeCachingAllocator::emptyCache", "DeviceCachingAllocator::emptyCache",
        "DeviceCachingAllocator::release_cached_blocks"},
       {},
       0},
  };
  return all;
}

// The first CUDA tensor creates the context (cudaFree(nullptr)) before the op's own lines.
std::string script_for(const OpCase& c) {
  return std::string(
             "import sys\n\nimport torch\n\n\ndef main():\n    cuda_context = torch.empty(1, device='cuda')\n") +
         c.setup + "    for step in range(" + std::to_string(kSteps) + "):\n        " + c.op + "  # OP\n\n\nmain()\n";
}

// Runs `script` with the stand-in on PYTHONPATH under `trainshim run --json`.
json run_script(const Scratch& s, const std::string& script, const std::string& site, const std::string& env = "") {
  std::ofstream(s.dir + "/train.py") << script;
  const auto result = run(env + " PYTHONPATH=" + site + " " + trainshim_cli() + " run --json --out " + s.db() +
                          " -- python3 " + s.dir + "/train.py");
  EXPECT_EQ(result.exit_code, 0) << result.out;
  if (result.exit_code != 0) return json::object();
  return json::parse(result.out);
}

std::vector<json> sites_at(const json& rank, const std::string& list, const std::string& file, int line) {
  std::vector<json> out;
  if (!rank.contains(list)) return out;
  for (const auto& site : rank.at(list))
    if (site.value("file", "").ends_with(file) && site.value("line", 0) == line) out.push_back(site);
  return out;
}

// The functions of a site's native stack, outermost first.
std::vector<std::string> outermost_first(const json& site) {
  std::vector<std::string> out;
  if (!site.contains("native_stack")) return out;
  for (const auto& frame : site.at("native_stack")) out.insert(out.begin(), frame.at("function").get<std::string>());
  return out;
}

// Whether `frames` contains every entry of `chain`, in order (each as a substring of a frame).
::testing::AssertionResult has_chain(const std::vector<std::string>& frames, const std::vector<const char*>& chain) {
  std::size_t next = 0;
  for (const auto& frame : frames)
    if (next < chain.size() && frame.find(chain[next]) != std::string::npos) ++next;
  if (next == chain.size()) return ::testing::AssertionSuccess();
  std::ostringstream out;
  out << "missing '" << chain[next] << "' (in order) in:";
  for (const auto& frame : frames) out << "\n  " << frame;
  return ::testing::AssertionFailure() << out.str();
}

std::map<std::string, int> copies_of(const json& rank) {
  std::map<std::string, int> out;
  for (const auto& c : rank.at("copies"))
    out[c.at("direction").get<std::string>() + " " + c.at("host_memory").get<std::string>()] +=
        c.at("calls").get<int>();
  return out;
}

// Copies (host <-> device) followed at once, on their thread, by a cudaStreamSynchronize of the
// same stream: memcpy_and_sync.
int64_t synced_copies(const std::string& db) {
  return query_int(db, "SELECT count(*) FROM (SELECT a.name AS api, d.name AS dir, e.stream AS stream,"
                       " LEAD(a.name) OVER w AS next_api, LEAD(e.stream) OVER w AS next_stream"
                       " FROM (SELECT process_id, tid, api, begin_ns, stream, direction, sequence FROM events UNION ALL"
                       " SELECT process_id, tid, api, begin_ns, stream, direction, sequence FROM recent_events) e"
                       " JOIN apis a ON a.id = e.api"
                       " JOIN directions d ON d.id = e.direction"
                       " WINDOW w AS (PARTITION BY e.process_id, e.tid ORDER BY e.begin_ns, e.sequence))"
                       " WHERE api = 'cudaMemcpyAsync' AND dir IN ('h2d', 'd2h') AND next_api = 'cudaStreamSynchronize'"
                       " AND next_stream = stream");
}

int64_t api_calls(const std::string& db, const std::string& api) {
  return query_int(
      db, "SELECT coalesce(sum(c.count), 0) FROM calls c JOIN apis a ON a.id = c.api WHERE a.name = '" + api + "'");
}

class TorchOps : public ::testing::TestWithParam<std::size_t> {};

TEST_P(TorchOps, NativeChainOperationAndMemoryKinds) {
  const OpCase& c = cases()[GetParam()];
  Scratch s;
  const std::string script = script_for(c);
  const json report = run_script(s, script, Paths::torchlike_site);
  ASSERT_FALSE(report.empty());
  ASSERT_EQ(report.at("ranks").size(), 1u);
  const json& rank = report.at("ranks")[0];
  const int line = marked_line(s.dir + "/train.py", "# OP");

  if (std::string(c.list).empty()) {
    EXPECT_TRUE(sites_at(rank, "hidden_syncs", "train.py", line).empty()) << rank.at("hidden_syncs").dump(1);
    EXPECT_TRUE(sites_at(rank, "explicit_syncs", "train.py", line).empty()) << rank.at("explicit_syncs").dump(1);
  } else {
    const auto sites = sites_at(rank, c.list, "train.py", line);
    int calls = 0;
    for (const auto& site : sites) calls += site.at("calls").get<int>();
    EXPECT_EQ(calls, c.syncs_per_step * kSteps) << rank.dump(1);
    ASSERT_FALSE(sites.empty()) << "no site at train.py:" << line << " in " << c.list;
    const json& site = sites[0];
    EXPECT_EQ(sites.size(), 1u) << "one operation at the line";
    EXPECT_EQ(site.at("operation"), c.operation);
    if (std::string(c.list) != "polls" || site.contains("native_stack")) {
      EXPECT_TRUE(has_chain(outermost_first(site), c.chain));
    }
    if (std::string(c.name) == "print") {
      bool formatter = false;
      for (const auto& frame : site.at("python_stack"))
        formatter = formatter || frame.at("file").get<std::string>().ends_with("torch/_tensor_str.py");
      EXPECT_TRUE(formatter) << site.at("python_stack").dump(1);
    }
  }
  std::map<std::string, int> expected;
  for (const auto& copy : c.copies) expected[std::string(copy.direction) + " " + copy.memory] += copy.calls;
  EXPECT_EQ(copies_of(rank), expected);
  EXPECT_EQ(synced_copies(s.db()), c.synced_copies);
}

INSTANTIATE_TEST_SUITE_P(Stand_in, TorchOps, ::testing::Range<std::size_t>(0, cases().size()),
                         [](const auto& info) { return std::string(cases()[info.param].name); });

const OpCase& case_named(const std::string& name) {
  for (const auto& c : cases())
    if (c.name == name) return c;
  throw std::runtime_error("no case " + name);
}

// torch calls cudaFree(nullptr) at the first CUDA tensor to create the context: not a sync.
TEST(TorchLike, ContextCreationIsNoSync) {
  Scratch s;
  const json report = run_script(s, script_for(case_named("item")), Paths::torchlike_site);
  ASSERT_FALSE(report.empty());
  const json& rank = report.at("ranks")[0];
  EXPECT_EQ(api_calls(s.db(), "cudaFree"), 1);
  for (const auto& site : rank.at("hidden_syncs")) EXPECT_NE(site.at("operation"), "cudaFree()") << site.dump(1);
}

// Libraries without .symtab (R21): the bindings lose their names, the exported op entries and
// kernels keep theirs, and the operation is still named.
TEST(TorchLike, StrippedLibrariesKeepTheOpEntryFrames) {
  Scratch s;
  const json report = run_script(s, script_for(case_named("item")), Paths::torchlike_stripped_site);
  ASSERT_FALSE(report.empty());
  const json& rank = report.at("ranks")[0];
  const auto sites = sites_at(rank, "hidden_syncs", "train.py", marked_line(s.dir + "/train.py", "# OP"));
  ASSERT_EQ(sites.size(), 1u) << rank.dump(1);
  EXPECT_EQ(sites[0].at("operation"), "Tensor.item()");
  const auto frames = outermost_first(sites[0]);
  EXPECT_TRUE(has_chain(frames, {"at::_ops::item::call", "at::native::item(", "at::_ops::_local_scalar_dense::call",
                                 "at::native::_local_scalar_dense_cuda"}));
  for (const auto& frame : frames) EXPECT_EQ(frame.find("THPVariable"), std::string::npos) << frame;
  EXPECT_EQ(sites[0].at("calls"), kSteps);
}

// A blocking upload's advice follows the checklist: from pageable memory, pin the source; from
// pinned memory (pin_memory() as the DataLoader's pin_memory=True does), non_blocking=True alone,
// in the site and in its finding, never "pin the source".
TEST(TorchLike, ABlockingUploadFromPinnedMemoryIsAdvisedNonBlockingAlone) {
  for (const bool pinned : {false, true}) {
    SCOPED_TRACE(pinned ? "pinned" : "pageable");
    Scratch s;
    const std::string script =
        std::string("import torch\n\n\ndef main():\n    cuda_context = torch.empty(1, device='cuda')\n") +
        "    h = torch.randn(256)" + (pinned ? ".pin_memory()" : "") + "\n    for step in range(" +
        std::to_string(kSteps) + "):\n        h.to('cuda')  # OP\n\n\nmain()\n";
    const json report = run_script(s, script, Paths::torchlike_site);
    ASSERT_FALSE(report.empty());
    const json& rank = report.at("ranks")[0];
    EXPECT_EQ(copies_of(rank), (std::map<std::string, int>{{pinned ? "h2d pinned" : "h2d pageable", kSteps}}));
    const auto sites = sites_at(rank, "hidden_syncs", "train.py", marked_line(s.dir + "/train.py", "# OP"));
    ASSERT_EQ(sites.size(), 1u) << rank.dump(1);
    EXPECT_EQ(sites[0].at("operation"), "Tensor.to('cuda') / .cuda() (blocking upload)");
    const std::string advice =
        pinned ? "the source is pinned already: pass non_blocking=True so the upload overlaps compute"
               : "pin the source (DataLoader(pin_memory=True)) and upload with non_blocking=True";
    EXPECT_EQ(sites[0].at("advice"), advice);
    int findings = 0;
    for (const auto& f : report.at("findings")) {
      if (f.at("kind") != "hidden_sync") continue;
      ++findings;
      EXPECT_EQ(f.at("advice"), advice) << f.dump(1);
    }
    EXPECT_EQ(findings, 1) << report.at("findings").dump(1);
  }
}

// Torch releases before the pinned scalar buffer copied item() into a stack variable.
TEST(TorchLike, OlderTorchReadsScalarsIntoPageableMemory) {
  Scratch s;
  const json report =
      run_script(s, script_for(case_named("item")), Paths::torchlike_site, "TORCHLIKE_SCALAR_INTO_PAGEABLE=1");
  ASSERT_FALSE(report.empty());
  EXPECT_EQ(copies_of(report.at("ranks")[0]), (std::map<std::string, int>{{"d2h pageable", kSteps}}));
  EXPECT_EQ(synced_copies(s.db()), kSteps);
}

// loss.backward(): the index's backward runs nonzero() again, on the engine's device thread,
// which has a Python thread state but no frames; the caller waits in run_backward.
TEST(TorchLike, BackwardSyncRunsOnTheEngineThread) {
  Scratch s;
  const std::string script =
      "import torch\n\n\ndef main():\n    x = torch.randn(256, device='cuda', requires_grad=True)\n"
      "    for step in range(3):\n        y = x[x.detach() > 0]  # FORWARD\n        y.sum().backward()  # "
      "BACKWARD\n\n\n"
      "main()\n";
  const json report = run_script(s, script, Paths::torchlike_site);
  ASSERT_FALSE(report.empty());
  const json& rank = report.at("ranks")[0];
  const std::string file = s.dir + "/train.py";
  const auto forward = sites_at(rank, "hidden_syncs", "train.py", marked_line(file, "# FORWARD"));
  ASSERT_EQ(forward.size(), 1u) << rank.at("hidden_syncs").dump(1);
  EXPECT_EQ(forward[0].at("calls"), 3);
  json backward;
  for (const auto& site : rank.at("hidden_syncs"))
    if (has_chain(outermost_first(site), {"IndexBackward0::apply"})) backward = site;
  ASSERT_FALSE(backward.is_null()) << rank.at("hidden_syncs").dump(1);
  EXPECT_EQ(backward.at("calls"), 3);
  EXPECT_TRUE(
      has_chain(outermost_first(backward),
                {"torch::autograd::python::PythonEngine::thread_init", "torch::autograd::Engine::thread_init",
                 "torch::autograd::Engine::thread_main", "IndexBackward0::apply", "at::_ops::index_put_::call",
                 "at::native::index_put_", "expandTensors", "at::_ops::nonzero::call", "at::native::nonzero_cuda"}));
  EXPECT_EQ(backward.at("operation"), "nonzero() / boolean-mask indexing");
  // Attributed to the line that called backward, marked as borrowed from that thread.
  EXPECT_EQ(backward.value("line", 0), marked_line(file, "# BACKWARD"));
  EXPECT_TRUE(backward.value("in_backward", false));
}

// torch.compile: the sync runs in inductor's generated module (<tmp>/torchinductor_<user>/…),
// called from dynamo's wrapper; the site belongs to the user's script.
TEST(TorchLike, CompiledGraphSyncBelongsToTheUsersLine) {
  Scratch s;
  const std::string script =
      "import torch\nimport torch._dynamo\n\ntorch._dynamo.config.capture_dynamic_output_shape_ops = True\n\n\n"
      "@torch.compile\ndef pick(x):\n    return x[x > 0].sum()  # PICK\n\n\ndef main():\n"
      "    x = torch.randn(256, device='cuda')\n    for step in range(4):\n        pick(x)  # CALL\n\n\nmain()\n";
  const json report =
      run_script(s, script, Paths::torchlike_site, "TORCHINDUCTOR_CACHE_DIR=" + s.dir + "/torchinductor_test");
  ASSERT_FALSE(report.empty());
  const json& rank = report.at("ranks")[0];
  json nonzero;
  for (const auto& site : rank.at("hidden_syncs"))
    if (has_chain(outermost_first(site), {"at::_ops::index_Tensor::call", "at::_ops::nonzero::call"})) nonzero = site;
  ASSERT_FALSE(nonzero.is_null()) << rank.at("hidden_syncs").dump(1);
  EXPECT_EQ(nonzero.at("calls"), 4);
  bool generated = false, wrapper = false;
  for (const auto& frame : nonzero.at("python_stack")) {
    const std::string path = frame.at("file");
    generated = generated || (path.find("/torchinductor_test/") != std::string::npos && frame.at("function") == "call");
    wrapper = wrapper || path.ends_with("torch/_dynamo/eval_frame.py");
  }
  EXPECT_TRUE(generated) << nonzero.at("python_stack").dump(1);
  EXPECT_TRUE(wrapper) << nonzero.at("python_stack").dump(1);
  EXPECT_TRUE(nonzero.at("file").get<std::string>().ends_with("/train.py")) << nonzero.at("file");
  EXPECT_EQ(nonzero.at("line"), marked_line(s.dir + "/train.py", "# CALL"));
}

// DataLoader(pin_memory=True, num_workers=2): batches are pinned by the pin-memory thread
// through the CUDA host allocator (cudaHostAlloc, blocks reused), uploaded and downloaded
// without a sync; the forked workers make no CUDA call and leave no trace. Two epochs, each
// ending in a stream sync: whether a block is reused within an epoch depends on how far the GPU
// got, but once the sync completed every freed block's event, the second epoch must reuse them.
TEST(TorchLike, DataLoaderPinsBatchesThroughTheHostAllocator) {
  Scratch s;
  const std::string script = "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\ndef main():\n"
                             "    ds = TensorDataset(torch.randn(64 * 8, 32))\n"
                             "    for epoch in range(2):\n"
                             "        for (xb,) in DataLoader(ds, batch_size=64, pin_memory=True, num_workers=2):\n"
                             "            xb = xb.to('cuda', non_blocking=True)  # H2D\n"
                             "            out = xb.sum(1).to('cpu', non_blocking=True)  # D2H\n"
                             "        torch.cuda.current_stream().synchronize()\n\n\nmain()\n";
  const json report = run_script(s, script, Paths::torchlike_site);
  ASSERT_FALSE(report.empty());
  ASSERT_EQ(report.at("ranks").size(), 1u) << "forked workers must leave no trace";
  const json& rank = report.at("ranks")[0];
  EXPECT_EQ(copies_of(rank), (std::map<std::string, int>{{"h2d pinned", 16}, {"d2h pinned", 16}}));
  // Only each epoch's last D2H is followed by a stream sync: the program's own.
  EXPECT_EQ(synced_copies(s.db()), 2);
  const std::string file = s.dir + "/train.py";
  for (const char* marker : {"# H2D", "# D2H"}) {
    EXPECT_TRUE(sites_at(rank, "hidden_syncs", "train.py", marked_line(file, marker)).empty()) << marker;
    EXPECT_TRUE(sites_at(rank, "pageable_sites", "train.py", marked_line(file, marker)).empty()) << marker;
  }
  // Batches are pinned on the pin-memory thread (which makes no copy), the non-blocking
  // downloads' pinned outputs on the main thread: 32 pinned tensors, in reused blocks.
  const int64_t pinned_blocks = api_calls(s.db(), "cudaHostAlloc");
  EXPECT_GE(pinned_blocks, 2);
  EXPECT_LT(pinned_blocks, 32);
  EXPECT_GE(
      query_int(s.db(), "SELECT count(*) FROM events e JOIN apis a ON a.id = e.api WHERE a.name = 'cudaHostAlloc' AND"
                        " e.tid NOT IN (SELECT e2.tid FROM recent_events e2 JOIN apis a2 ON a2.id = e2.api"
                        " WHERE a2.name = 'cudaMemcpyAsync')"),
      1);
}

// PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True: malloc + cudaHostRegister.
TEST(TorchLike, PinnedMemoryByHostRegisterWhenConfigured) {
  Scratch s;
  const json report = run_script(s, script_for(case_named("upload_pinned_async")), Paths::torchlike_site,
                                 "PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True");
  ASSERT_FALSE(report.empty());
  EXPECT_EQ(copies_of(report.at("ranks")[0]), (std::map<std::string, int>{{"h2d pinned", kSteps}}));
  EXPECT_EQ(api_calls(s.db(), "cudaHostRegister"), 1);
  EXPECT_EQ(api_calls(s.db(), "cudaHostAlloc"), 0);
}

// Symbol visibility as in the wheels: op entries, native TORCH_API kernels and c10::cuda
// functions are exported; bindings and static kernels are in .symtab only, and the stripped
// copy has no .symtab at all.
TEST(TorchLike, ExportsMatchTheWheel) {
  const std::string lib = std::string(Paths::torchlike_site) + "/torch/lib/";
  const std::string stripped = std::string(Paths::torchlike_stripped_site) + "/torch/lib/";
  const auto exported = [](const std::string& file) { return run("nm -D -C --defined-only " + file).out; };
  const auto local = [](const std::string& file) { return run("nm -C --defined-only " + file + " 2>&1").out; };
  const std::string cpu = exported(lib + "libtorch_cpu.so");
  EXPECT_NE(cpu.find("T at::_ops::item::call(at::Tensor const&)"), std::string::npos);
  EXPECT_NE(cpu.find("T at::native::item(at::Tensor const&)"), std::string::npos);
  EXPECT_EQ(cpu.find("copy_impl"), std::string::npos);
  const std::string cuda = exported(lib + "libtorch_cuda.so");
  EXPECT_NE(cuda.find("T at::native::_local_scalar_dense_cuda(at::Tensor const&)"), std::string::npos);
  EXPECT_EQ(cuda.find("copy_kernel_cuda"), std::string::npos);
  EXPECT_EQ(cuda.find("wrapper_CUDA"), std::string::npos);
  EXPECT_NE(exported(lib + "libc10_cuda.so").find("T c10::cuda::device_synchronize()"), std::string::npos);
  const std::string python = exported(lib + "libtorch_python.so");
  EXPECT_EQ(python.find("THPVariable"), std::string::npos);
  EXPECT_EQ(python.find("THCP"), std::string::npos);
  EXPECT_NE(python.find("T torchlike_methods"), std::string::npos);
  EXPECT_NE(local(lib + "libtorch_python.so").find("t torch::autograd::THPVariable_item(void*)"), std::string::npos);
  EXPECT_NE(local(lib + "libtorch_cuda.so").find("copy_kernel_cuda"), std::string::npos);
  EXPECT_NE(local(stripped + "libtorch_python.so").find("no symbols"), std::string::npos);
  EXPECT_NE(exported(stripped + "libtorch_cpu.so").find("T at::_ops::item::call(at::Tensor const&)"),
            std::string::npos);
}

}  // namespace
}  // namespace trainshim::test
