// Built instead of mpi_communicator.cpp when CMake found no MPI: --tp N > 1 then says what to
// install rather than failing to link.
#include "backend/comm/communicator.h"

namespace tern {

bool mpi_available() {
  return false;
}

Result<std::unique_ptr<Communicator>> make_mpi_communicator() {
  return Error{
      "this tern was built without MPI, which running a model over several processes needs: "
      "install Open MPI (Debian: libopenmpi-dev openmpi-bin) and rebuild"};
}

}  // namespace tern
