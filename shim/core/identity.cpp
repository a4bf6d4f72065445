#include "identity.hpp"

#include <cstdlib>

#include "trainshim/names.hpp"

namespace trainshim::shim {

namespace {

struct LauncherVariables {
  const char* rank;
  const char* local_rank;
  const char* world_size;
  const char* local_world_size;  // Slurm's only when srun was given --ntasks-per-node
};

constexpr LauncherVariables kLaunchers[] = {
    {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"},
    {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS"},
};

int integer_variable(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return -1;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return (*end == '\0' && parsed >= 0 && parsed < (1L << 30)) ? int(parsed) : -1;
}

}  // namespace

Identity identity_from_environment() {
  Identity id;
  id.job = job_from_environment();
  for (const auto& launcher : kLaunchers) {
    const int rank = integer_variable(launcher.rank);
    if (rank < 0) continue;
    id.rank = rank;
    id.local_rank = integer_variable(launcher.local_rank);
    id.world_size = integer_variable(launcher.world_size);
    id.local_world_size = integer_variable(launcher.local_world_size);
    break;
  }
  return id;
}

}  // namespace trainshim::shim
