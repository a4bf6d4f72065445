#pragma once
// PyTorch libraries of a run whose symbol table (.symtab) is gone. PyTorch builds with
// -fvisibility=hidden, so its binding frames (THPVariable_*, THCP*) are named only in .symtab; a
// build that strips it (some distribution and conda packages, custom builds) leaves the classifier
// the exported op-entry frames alone, and Event/Stream synchronize unnamed.
#include <optional>
#include <string>
#include <vector>

#include "store/run_database.hpp"

namespace trainshim::cli {

// Whether the ELF file has a .symtab section; nullopt when it cannot be read (moved, not ELF).
std::optional<bool> has_symbol_table(const std::string& path);

// The distinct paths of the run's loaded PyTorch libraries (libtorch*, libc10*) that exist here
// and have no .symtab.
std::vector<std::string> stripped_torch_libraries(const RunDatabase& db);

}  // namespace trainshim::cli
