// Built instead of nccl_communicator.cpp outside CUDA builds that found NCCL.
#include "backend/comm/communicator.h"

namespace tern {

bool nccl_available() {
  return false;
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator&, int) {
  return Error{
      "this tern has no NCCL: build the CUDA backend (scripts/build-cuda.sh) where NCCL is "
      "installed"};
}

}  // namespace tern
