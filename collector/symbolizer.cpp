#include "symbolizer.hpp"

#include <cxxabi.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>

#include "named_file.hpp"

namespace trainshim::collector {
namespace {

// What the symbolizer needs from a file on disk before handing it to libdw.
struct ElfFacts {
  std::string build_id;
  uint64_t first_vaddr = 0;  // page-aligned start of the first PT_LOAD
  uint64_t end_vaddr = 0;    // end of the last PT_LOAD
};

struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) close(fd);
  }
};

std::optional<ElfFacts> read_elf_facts(const std::string& path) {
  FdCloser file{open_regular_file(path)};
  if (file.fd < 0 || elf_version(EV_CURRENT) == EV_NONE) return std::nullopt;
  std::unique_ptr<Elf, decltype(&elf_end)> elf(elf_begin(file.fd, ELF_C_READ_MMAP, nullptr), &elf_end);
  if (!elf || elf_kind(elf.get()) != ELF_K_ELF) return std::nullopt;

  ElfFacts facts;
  const void* id = nullptr;
  const ssize_t id_size = dwelf_elf_gnu_build_id(elf.get(), &id);
  if (id_size > 0) facts.build_id.assign(static_cast<const char*>(id), static_cast<size_t>(id_size));

  size_t phnum = 0;
  if (elf_getphdrnum(elf.get(), &phnum) != 0) return std::nullopt;
  bool first = true;
  for (size_t i = 0; i < phnum; ++i) {
    GElf_Phdr phdr;
    if (gelf_getphdr(elf.get(), static_cast<int>(i), &phdr) == nullptr) return std::nullopt;
    if (phdr.p_type != PT_LOAD) continue;
    if (first) {
      facts.first_vaddr = phdr.p_align > 1 ? phdr.p_vaddr & ~(phdr.p_align - 1) : phdr.p_vaddr;
      first = false;
    }
    facts.end_vaddr = std::max(facts.end_vaddr, phdr.p_vaddr + phdr.p_memsz);
  }
  return facts;
}

std::string demangle(const char* name) {
  // Only mangled names: __cxa_demangle also accepts bare type encodings, so a C function named
  // "f" would come back as "float".
  if (name[0] != '_' || name[1] != 'Z') return name;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                                        &std::free);
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(name);
}

void set_source(const char* file, int line, Symbol& symbol) {
  // Line 0 marks code the compiler attributes to no source line.
  if (file != nullptr && line > 0) {
    symbol.file = file;
    symbol.line = line;
  }
}

const Dwfl_Callbacks kOfflineCallbacks = {
    // Only asked for a module reported without its file, which add_module never does.
    .find_elf = dwfl_build_id_find_elf,
    // Separate debug info by build id or .gnu_debuglink under /usr/lib/debug and beside the file.
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = nullptr,
};

}  // namespace

std::string build_id_of_file(const std::string& path) {
  const auto facts = read_elf_facts(path);
  return facts ? facts->build_id : std::string();
}

Symbolizer::Symbolizer() : dwfl_(dwfl_begin(&kOfflineCallbacks)) {
  if (dwfl_ == nullptr) throw std::runtime_error(std::string("dwfl_begin: ") + dwfl_errmsg(-1));
}

Symbolizer::~Symbolizer() { dwfl_end(dwfl_); }

void Symbolizer::add_module(const ModuleInfo& module) {
  if (!added_.emplace(module.path, module.base).second) return;
  const auto facts = read_elf_facts(module.path);
  if (!facts) return;
  // Addresses that fell in no module before may fall in this one now.
  cache_[0].clear();
  cache_[1].clear();

  if (!module.build_id.empty() && facts->build_id != module.build_id) {
    stale_.push_back({module.path, module.base, module.base + facts->first_vaddr, module.base + facts->end_vaddr});
    return;
  }
  // Given a descriptor, libdwfl does not open the path again (it might be something else by now).
  const int fd = open_regular_file(module.path);
  if (fd < 0) return;
  // Added to what is there: dwfl_report_begin would drop every module not reported again.
  dwfl_report_begin_add(dwfl_);
  // add_p_vaddr: `base` is the load bias, not the address of the first segment.
  Dwfl_Module* reported = dwfl_report_elf(dwfl_, module.path.c_str(), module.path.c_str(), fd, module.base, true);
  if (reported == nullptr) close(fd);
  dwfl_report_end(dwfl_, nullptr, nullptr);
  if (reported != nullptr) loaded_.emplace(reported, Loaded{module.path, module.base, false, {}});
}

Symbol Symbolizer::resolve(uint64_t address, bool return_address) {
  auto& cache = cache_[return_address ? 1 : 0];
  if (const auto hit = cache.find(address); hit != cache.end()) return hit->second;
  return cache.emplace(address, lookup(address, return_address)).first->second;
}

Symbol Symbolizer::lookup(uint64_t address, bool return_address) {
  Symbol symbol;
  if (address == 0) return symbol;
  // A return address is the instruction after the call; the call itself is the byte before.
  const uint64_t pc = return_address ? address - 1 : address;

  Dwfl_Module* module = dwfl_addrmodule(dwfl_, pc);
  const auto loaded = module != nullptr ? loaded_.find(module) : loaded_.end();
  if (loaded == loaded_.end()) {
    for (const auto& extent : stale_) {
      if (pc >= extent.start && pc < extent.end) {
        symbol.module = extent.path;
        symbol.module_offset = address - extent.base;
        symbol.stale = true;
        return symbol;
      }
    }
    return symbol;
  }
  symbol.module = loaded->second.path;
  symbol.module_offset = address - loaded->second.base;

  GElf_Off offset = 0;
  GElf_Sym sym;
  if (const char* name = dwfl_module_addrinfo(module, pc, &offset, &sym, nullptr, nullptr, nullptr)) {
    symbol.function = demangle(name);
  }
  if (Dwfl_Line* line = dwfl_module_getsrc(module, pc)) {
    int lineno = 0;
    const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
    set_source(file, lineno, symbol);
  } else {
    source_from_cu_ranges(module, loaded->second, pc, symbol);
  }
  return symbol;
}

// dwfl_module_getsrc finds the compilation unit through .debug_aranges only (elfutils < 0.192),
// which clang does not emit by default: then the units' own address ranges are searched.
void Symbolizer::source_from_cu_ranges(Dwfl_Module* module, Loaded& loaded, uint64_t pc, Symbol& symbol) {
  Dwarf_Addr bias = 0;
  Dwarf* dwarf = dwfl_module_getdwarf(module, &bias);
  if (dwarf == nullptr) return;
  if (!loaded.cu_ranges_built) {
    loaded.cu_ranges_built = true;
    Dwarf_CU* unit = nullptr;
    Dwarf_Die unit_die;
    while (dwarf_get_units(dwarf, unit, &unit, nullptr, nullptr, &unit_die, nullptr) == 0) {
      Dwarf_Addr range_base = 0, start = 0, end = 0;
      ptrdiff_t offset = 0;
      while ((offset = dwarf_ranges(&unit_die, offset, &range_base, &start, &end)) > 0) {
        if (start < end) loaded.cu_ranges.push_back({start, end, dwarf_dieoffset(&unit_die)});
      }
    }
    std::sort(loaded.cu_ranges.begin(), loaded.cu_ranges.end(),
              [](const CuRange& a, const CuRange& b) { return a.start < b.start; });
  }
  const uint64_t dwarf_pc = pc - bias;
  auto after = std::upper_bound(loaded.cu_ranges.begin(), loaded.cu_ranges.end(), dwarf_pc,
                                [](uint64_t value, const CuRange& range) { return value < range.start; });
  if (after == loaded.cu_ranges.begin() || dwarf_pc >= std::prev(after)->end) return;
  Dwarf_Die unit_die;
  if (dwarf_offdie(dwarf, std::prev(after)->die_offset, &unit_die) == nullptr) return;
  if (Dwarf_Line* line = dwarf_getsrc_die(&unit_die, dwarf_pc)) {
    int lineno = 0;
    dwarf_lineno(line, &lineno);
    set_source(dwarf_linesrc(line, nullptr, nullptr), lineno, symbol);
  }
}

}  // namespace trainshim::collector
