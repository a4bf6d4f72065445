#pragma once
// Who this process is in its job: read once from the launcher's environment.
#include <string>

namespace trainshim::shim {

struct Identity {
  int rank = -1;  // -1: not started by a launcher trainshim knows
  int local_rank = -1;
  int world_size = -1;
  int local_world_size = -1;  // the ranks on this node; -1: not said by the launcher
  std::string job;
};

// torchrun's variables, else Slurm's, else Open MPI's, else PMI's (MPICH, Intel MPI).
Identity identity_from_environment();

}  // namespace trainshim::shim
