// Reads the rank layout the launcher exported, so that `--tp N` can say how to launch before
// MPI is initialised (MPI_Init outside mpirun would silently make a group of one).
#include <cstdlib>
#include <string>

#include "backend/comm/communicator.h"

namespace tern {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > (1 << 20)) return fallback;
  return static_cast<int>(n);
}

}  // namespace

LaunchedRanks launched_ranks() {
  LaunchedRanks r;
  // Open MPI (mpirun / prterun) first, then the PMI(x) variables other launchers set.
  r.size = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 0));
  r.rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMIX_RANK", env_int("PMI_RANK", 0)));
  r.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("MPI_LOCALRANKID", 0));
  r.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("MPI_LOCALNRANKS", 1));
  if (r.local_size < 1) r.local_size = 1;
  return r;
}

}  // namespace tern
