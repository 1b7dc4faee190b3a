// The main() of the GoogleTest suites that run as several ranks under mpirun: MPI is joined
// once, every rank runs every test in the same order (their collectives must match), and only
// rank 0 prints the results (a failure on another rank still fails the run: its exit status).
#pragma once

#include "backend/comm/communicator.h"

namespace tern::testing {

// The world's ranks (Open MPI); valid for the whole test run.
Communicator& world();

}  // namespace tern::testing
