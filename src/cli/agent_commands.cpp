// Wiring only: the command is being written (issue 6).
#include "cli/command.h"

namespace tern::cli {
void add_agent_commands(CLI::App&, CommandContext&) {}
}  // namespace tern::cli
