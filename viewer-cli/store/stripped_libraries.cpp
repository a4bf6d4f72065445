#include "store/stripped_libraries.hpp"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

namespace trainshim::cli {

std::optional<bool> has_symbol_table(const std::string& path) {
  if (elf_version(EV_CURRENT) == EV_NONE) return std::nullopt;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<bool> found;
  if (Elf* elf = elf_begin(fd, ELF_C_READ, nullptr)) {
    if (elf_kind(elf) == ELF_K_ELF) {
      found = false;
      for (Elf_Scn* section = elf_nextscn(elf, nullptr); section && !*found; section = elf_nextscn(elf, section)) {
        GElf_Shdr header;
        if (gelf_getshdr(section, &header) && header.sh_type == SHT_SYMTAB) found = true;
      }
    }
    elf_end(elf);
  }
  close(fd);
  return found;
}

std::vector<std::string> stripped_torch_libraries(const RunDatabase& db) {
  std::vector<std::string> stripped;
  Statement q(db, "SELECT DISTINCT path FROM modules ORDER BY path");
  while (q.step()) {
    const std::string path = q.text(0);
    const auto slash = path.rfind('/');
    const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (!name.starts_with("libtorch") && !name.starts_with("libc10")) continue;
    if (has_symbol_table(path) == false) stripped.push_back(path);
  }
  return stripped;
}

}  // namespace trainshim::cli
