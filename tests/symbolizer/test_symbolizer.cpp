// The symbolizer against this test process's own modules, listed the way the shim lists them
// (dl_iterate_phdr: path, load bias, build id from the in-memory note).
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "symbolizer.hpp"
#include "symbolizer_testlib.hpp"

namespace trainshim_test {

constexpr int kOuterFirstLine = __LINE__;
TRAINSHIM_TEST_OPAQUE int outer_function(int x) {
  volatile int scaled = x * 3;
  return scaled + 1;
}
constexpr int kOuterLastLine = __LINE__;

TRAINSHIM_TEST_OPAQUE const void* capture_return_address() { return __builtin_return_address(0); }

TRAINSHIM_TEST_OPAQUE const void* middle_function(int* call_line) {
  const void* return_address = capture_return_address();
  *call_line = __LINE__ - 1;  // the line of the call above
  // Work after the call keeps it from becoming a tail jump, which would return past this function.
  asm volatile("" : : "r"(return_address) : "memory");
  return return_address;
}

TRAINSHIM_TEST_OPAQUE const void* top_function(int* call_line) {
  const void* return_address = middle_function(call_line);
  asm volatile("" : : "r"(return_address) : "memory");
  return return_address;
}

struct Captured {
  const void* return_address;
};

[[noreturn]] TRAINSHIM_TEST_OPAQUE void throw_return_address() { throw Captured{__builtin_return_address(0)}; }

// The call is this function's last instruction: its return address lies past the function's end.
TRAINSHIM_TEST_OPAQUE void call_that_never_returns(int* call_line) {
  *call_line = __LINE__ + 1;
  throw_return_address();
}

}  // namespace trainshim_test

namespace {

using trainshim::collector::build_id_of_file;
using trainshim::collector::ModuleInfo;
using trainshim::collector::Symbol;
using trainshim::collector::Symbolizer;

std::string in_memory_build_id(const dl_phdr_info& info) {
  for (int i = 0; i < info.dlpi_phnum; ++i) {
    const ElfW(Phdr)& phdr = info.dlpi_phdr[i];
    if (phdr.p_type != PT_NOTE) continue;
    // Note fields are padded to the segment's alignment (4, or 8 for GNU property notes).
    const size_t align = phdr.p_align == 8 ? 8 : 4;
    const auto pad = [align](size_t n) { return (n + align - 1) & ~(align - 1); };
    const char* note = reinterpret_cast<const char*>(info.dlpi_addr + phdr.p_vaddr);
    const char* end = note + phdr.p_memsz;
    while (note + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) header;
      std::memcpy(&header, note, sizeof header);
      const char* name = note + sizeof header;
      const char* desc = name + pad(header.n_namesz);
      if (desc + header.n_descsz > end) break;
      if (header.n_type == NT_GNU_BUILD_ID && header.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        return std::string(desc, header.n_descsz);
      }
      note = desc + pad(header.n_descsz);
    }
  }
  return {};
}

std::vector<ModuleInfo> own_modules() {
  std::vector<ModuleInfo> modules;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto& out = *static_cast<std::vector<ModuleInfo>*>(data);
        std::string path = info->dlpi_name != nullptr ? info->dlpi_name : "";
        // The main program comes first and unnamed.
        if (path.empty()) {
          if (!out.empty()) return 0;
          path = std::filesystem::read_symlink("/proc/self/exe").string();
        }
        out.push_back({path, info->dlpi_addr, in_memory_build_id(*info)});
        return 0;
      },
      &modules);
  return modules;
}

const ModuleInfo& module_containing(const std::vector<ModuleInfo>& modules, const void* address) {
  Dl_info info{};
  EXPECT_NE(dladdr(address, &info), 0);
  for (const auto& module : modules) {
    if (std::filesystem::path(module.path).filename() == std::filesystem::path(info.dli_fname).filename()) {
      return module;
    }
  }
  ADD_FAILURE() << "no module for " << address;
  return modules.front();
}

uint64_t as_address(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }

class SymbolizerTest : public testing::Test {
 protected:
  void SetUp() override {
    modules_ = own_modules();
    for (const auto& module : modules_) symbolizer_.add_module(module);
  }

  std::vector<ModuleInfo> modules_;
  Symbolizer symbolizer_;
};

TEST_F(SymbolizerTest, FunctionAddressResolvesToItsDemangledNameAndSource) {
  const Symbol symbol = symbolizer_.resolve(as_address(reinterpret_cast<const void*>(&trainshim_test::outer_function)),
                                            /*return_address=*/false);
  EXPECT_EQ(symbol.function, "trainshim_test::outer_function(int)");
  EXPECT_EQ(symbol.module, modules_.front().path);
  EXPECT_FALSE(symbol.stale);
  EXPECT_TRUE(symbol.file.ends_with("test_symbolizer.cpp")) << symbol.file;
  EXPECT_GT(symbol.line, trainshim_test::kOuterFirstLine);
  EXPECT_LT(symbol.line, trainshim_test::kOuterLastLine);
}

TEST_F(SymbolizerTest, ReturnAddressResolvesToTheCallersCallLine) {
  int call_line = 0;
  const void* return_address = trainshim_test::top_function(&call_line);
  const Symbol symbol = symbolizer_.resolve(as_address(return_address));
  EXPECT_EQ(symbol.function, "trainshim_test::middle_function(int*)");
  EXPECT_TRUE(symbol.file.ends_with("test_symbolizer.cpp")) << symbol.file;
  EXPECT_EQ(symbol.line, call_line);
  EXPECT_EQ(symbol.module_offset, as_address(return_address) - modules_.front().base);
  // Cached: the same answer again.
  const Symbol again = symbolizer_.resolve(as_address(return_address));
  EXPECT_EQ(again.function, symbol.function);
  EXPECT_EQ(again.line, symbol.line);
}

TEST_F(SymbolizerTest, ReturnAddressOfANoreturnCallResolvesToTheCaller) {
  int call_line = 0;
  const void* return_address = nullptr;
  try {
    trainshim_test::call_that_never_returns(&call_line);
  } catch (const trainshim_test::Captured& captured) {
    return_address = captured.return_address;
  }
  const Symbol symbol = symbolizer_.resolve(as_address(return_address));
  EXPECT_EQ(symbol.function, "trainshim_test::call_that_never_returns(int*)");
  EXPECT_EQ(symbol.line, call_line);
}

TEST_F(SymbolizerTest, SharedLibraryFunctionResolvesWithItsModule) {
  int call_line = 0;
  const void* return_address = trainshim_test_lib::library_function(&call_line);
  const ModuleInfo& library = module_containing(modules_, return_address);
  ASSERT_TRUE(library.path.ends_with("libtrainshim_symbolizer_testlib.so")) << library.path;

  const Symbol symbol = symbolizer_.resolve(as_address(return_address));
  EXPECT_EQ(symbol.function, "trainshim_test_lib::library_function(int*)");
  EXPECT_EQ(symbol.module, library.path);
  EXPECT_EQ(symbol.module_offset, as_address(return_address) - library.base);
  EXPECT_TRUE(symbol.file.ends_with("symbolizer_testlib.cpp")) << symbol.file;
  EXPECT_EQ(symbol.line, call_line);
}

TEST_F(SymbolizerTest, SystemLibraryWithoutDebugInfoResolvesByItsDynamicSymbols) {
  // Looked up in libdw itself, not through this program's PLT.
  void* libdw = dlopen("libdw.so.1", RTLD_LAZY | RTLD_NOLOAD);
  ASSERT_NE(libdw, nullptr);
  const void* function = dlsym(libdw, "dwfl_begin");
  dlclose(libdw);
  ASSERT_NE(function, nullptr);

  const Symbol symbol = symbolizer_.resolve(as_address(function), /*return_address=*/false);
  EXPECT_EQ(symbol.function, "dwfl_begin");
  EXPECT_TRUE(symbol.module.ends_with("libdw.so.1")) << symbol.module;
}

TEST_F(SymbolizerTest, AddressInNoModuleIsUnknown) {
  const long page_size = sysconf(_SC_PAGESIZE);
  void* anonymous = mmap(nullptr, page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(anonymous, MAP_FAILED);
  for (const uint64_t address : {as_address(anonymous) + 16, uint64_t{0x10}, uint64_t{0}, ~uint64_t{0}}) {
    for (const bool return_address : {true, false}) {
      const Symbol symbol = symbolizer_.resolve(address, return_address);
      EXPECT_TRUE(symbol.module.empty()) << std::hex << address << " " << symbol.module;
      EXPECT_TRUE(symbol.function.empty()) << std::hex << address << " " << symbol.function;
    }
  }
  munmap(anonymous, page_size);
}

TEST_F(SymbolizerTest, BuildIdOfFileMatchesTheInMemoryOne) {
  const ModuleInfo& main_program = modules_.front();
  ASSERT_FALSE(main_program.build_id.empty());
  EXPECT_EQ(build_id_of_file(main_program.path), main_program.build_id);
  EXPECT_EQ(build_id_of_file("/proc/self/exe"), main_program.build_id);
}

TEST(Symbolizer, ModuleAddedLaterResolvesAndRepeatedAddIsANoOp) {
  int call_line = 0;
  const void* return_address = trainshim_test_lib::library_function(&call_line);
  const auto modules = own_modules();
  const ModuleInfo& library = module_containing(modules, return_address);

  Symbolizer symbolizer;
  symbolizer.add_module(modules.front());
  EXPECT_TRUE(symbolizer.resolve(as_address(return_address)).module.empty());

  symbolizer.add_module(library);
  symbolizer.add_module(library);
  const Symbol symbol = symbolizer.resolve(as_address(return_address));
  EXPECT_EQ(symbol.function, "trainshim_test_lib::library_function(int*)");
  EXPECT_EQ(symbol.line, call_line);
}

TEST(Symbolizer, ModuleRebuiltSinceTheRunIsStaleAndUnnamed) {
  int call_line = 0;
  const void* return_address = trainshim_test_lib::library_function(&call_line);
  ModuleInfo library = module_containing(own_modules(), return_address);
  ASSERT_FALSE(library.build_id.empty());
  library.build_id[0] = static_cast<char>(library.build_id[0] ^ 0xff);

  Symbolizer symbolizer;
  symbolizer.add_module(library);
  const Symbol symbol = symbolizer.resolve(as_address(return_address));
  EXPECT_TRUE(symbol.stale);
  EXPECT_EQ(symbol.module, library.path);
  EXPECT_EQ(symbol.module_offset, as_address(return_address) - library.base);
  EXPECT_TRUE(symbol.function.empty()) << symbol.function;
  EXPECT_TRUE(symbol.file.empty()) << symbol.file;
}

TEST(Symbolizer, SourceLineFoundWithoutDebugAranges) {
  int call_line = 0;
  const void* return_address = trainshim_test_lib::library_function(&call_line);
  ModuleInfo library = module_containing(own_modules(), return_address);
  // The same code, its debug info without the address index clang leaves out by default.
  library.path = TRAINSHIM_TESTLIB_NO_ARANGES;
  ASSERT_EQ(build_id_of_file(library.path), library.build_id);

  Symbolizer symbolizer;
  symbolizer.add_module(library);
  const Symbol symbol = symbolizer.resolve(as_address(return_address));
  EXPECT_EQ(symbol.function, "trainshim_test_lib::library_function(int*)");
  EXPECT_TRUE(symbol.file.ends_with("symbolizer_testlib.cpp")) << symbol.file;
  EXPECT_EQ(symbol.line, call_line);
}

TEST(Symbolizer, MissingNonElfAndTruncatedFilesAreSkipped) {
  const auto directory = std::filesystem::temp_directory_path() / ("trainshim_symbolizer_" + std::to_string(getpid()));
  std::filesystem::create_directories(directory);
  const std::string not_elf = directory / "not_elf.so";
  const std::string truncated = directory / "truncated.so";
  std::ofstream(not_elf) << "not an ELF file\n";
  {
    // The first bytes of this program: a valid ELF header whose tables lie past the end.
    std::ifstream source("/proc/self/exe", std::ios::binary);
    std::vector<char> head(200);
    source.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(truncated, std::ios::binary).write(head.data(), source.gcount());
  }

  const uint64_t base = 0x7f0000000000;
  Symbolizer symbolizer;
  symbolizer.add_module({"/nonexistent/trainshim/libmissing.so", base, "\x12\x34"});
  symbolizer.add_module({not_elf, base + 0x100000, ""});
  symbolizer.add_module({truncated, base + 0x200000, ""});
  for (const uint64_t offset : {0x1000, 0x101000, 0x201000}) {
    const Symbol symbol = symbolizer.resolve(base + offset);
    EXPECT_TRUE(symbol.function.empty()) << symbol.function;
    EXPECT_FALSE(symbol.stale);
  }
  EXPECT_EQ(build_id_of_file("/nonexistent/trainshim/libmissing.so"), "");
  EXPECT_EQ(build_id_of_file(not_elf), "");
  EXPECT_EQ(build_id_of_file(truncated), "");
  std::filesystem::remove_all(directory);
}

}  // namespace
