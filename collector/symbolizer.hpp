#pragma once
// Turns the raw instruction addresses of a profiled process's native stacks into module, function
// and source line, from the module list the shim recorded (path, load bias, build id). Runs in the
// collector, possibly after the profiled process has exited, so it reads the files on disk and
// refuses names from a file whose build id no longer matches the recorded one.
#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

struct Dwfl;
struct Dwfl_Module;

namespace trainshim::collector {

struct ModuleInfo {
  std::string path;
  uint64_t base = 0;     // dlpi_addr: runtime address minus link-time address
  std::string build_id;  // raw bytes, may be empty (then the file on disk is trusted)
};

struct Symbol {
  std::string module;          // path of the module, empty if the address is in none
  uint64_t module_offset = 0;  // address - base
  std::string function;        // demangled; empty when unknown
  std::string file;            // source file, empty when no debug info
  int line = 0;
  bool stale = false;  // the module on disk no longer matches the recorded build id
};

// One per profiled process. Not thread-safe.
class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Modules of one process; may be called again with modules loaded later (dlopen): adding a
  // module with the same path and base is a no-op. A file that is missing or not ELF is skipped.
  void add_module(const ModuleInfo& module);
  // `return_address`: the address follows a call (a stack frame's return address), so the call
  // instruction before it is looked up; false for an exact instruction address.
  Symbol resolve(uint64_t address, bool return_address = true);

 private:
  // Address range of one compilation unit, relative to the module's debug info.
  struct CuRange {
    uint64_t start;
    uint64_t end;
    uint64_t die_offset;
  };
  struct Loaded {
    std::string path;
    uint64_t base;
    bool cu_ranges_built = false;
    std::vector<CuRange> cu_ranges;  // sorted by start
  };
  // A module whose file no longer matches: kept out of libdw, located by the file's own layout.
  struct StaleExtent {
    std::string path;
    uint64_t base;
    uint64_t start;
    uint64_t end;
  };

  Symbol lookup(uint64_t address, bool return_address);
  static void source_from_cu_ranges(Dwfl_Module* module, Loaded& loaded, uint64_t pc, Symbol& symbol);

  Dwfl* dwfl_;
  std::set<std::pair<std::string, uint64_t>> added_;
  std::unordered_map<Dwfl_Module*, Loaded> loaded_;
  std::vector<StaleExtent> stale_;
  std::unordered_map<uint64_t, Symbol> cache_[2];  // indexed by return_address
};

// The GNU build id of an ELF file on disk, empty when none or when the file is not readable ELF.
std::string build_id_of_file(const std::string& path);

}  // namespace trainshim::collector
