// Writes the sample GGUF (and a split copy) so python's gguf reader can check Tern's writer.
// Usage: gguf_write_sample OUT_DIR
#include <cstdio>
#include <string>

#include "gguf_sample.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  for (uint32_t version : {2u, 3u}) {
    tern::GgufWriter writer(version, version == 2 ? 32 : 64);
    std::vector<std::vector<uint8_t>> payload;
    tern::testing::fill_sample(writer, payload);
    auto ok = writer.write(dir + "/sample-v" + std::to_string(version) + ".gguf");
    if (!ok) {
      std::fprintf(stderr, "%s\n", ok.error().message.c_str());
      return 1;
    }
  }
  return 0;
}
