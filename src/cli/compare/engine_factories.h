// The engines of `tern bench compare`, one file each (find_engines in engines.cpp picks them).
#pragma once

#include <memory>
#include <string>

#include "cli/compare/engines.h"

namespace tern::cli {

std::unique_ptr<CompareEngine> make_tern_engine(const std::string& tern, const CompareSetup& s);
std::unique_ptr<CompareEngine> make_llama_bench_engine(const std::string& binary,
                                                       const CompareSetup& s);
std::unique_ptr<CompareEngine> make_llama_server_engine(const std::string& binary,
                                                        const CompareSetup& s);
std::unique_ptr<CompareEngine> make_ollama_engine(const std::string& binary, const CompareSetup& s);

}  // namespace tern::cli
