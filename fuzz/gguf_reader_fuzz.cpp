// libFuzzer target: any byte string given to the GGUF reader and the typed-config parsers must
// yield a file or a clear error — no crash, no hang, no allocation beyond the input's size.
#include <cstddef>
#include <cstdint>

#include "config/model_info.h"
#include "config/tokenizer_spec.h"
#include "io/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = tern::GgufFile::parse({data, size}, "fuzz.gguf");
  if (!file) return 0;
  auto info = tern::model_info_from_gguf(*file);
  auto spec = tern::tokenizer_spec_from_gguf(*file);
  // Touch every tensor byte range the reader vouched for: ASan catches any that lie outside.
  volatile uint8_t sink = 0;
  for (const auto& t : file->tensors()) {
    if (t.size_bytes > 0) sink = static_cast<uint8_t>(sink ^ t.data[0] ^ t.data[t.size_bytes - 1]);
  }
  for (const auto& [key, value] : file->metadata().entries()) (void)value.to_display();
  (void)info;
  (void)spec;
  return 0;
}
