// A client for a Hugging Face-compatible model hub: the file list of a repository at a revision
// (with each file's size and, for LFS files, its sha256), and resumable, verified downloads.
//
// Endpoints (the hub's public HTTP API): GET {endpoint}/api/models/{repo}/tree/{revision} for
// the listing, GET {endpoint}/{repo}/resolve/{revision}/{path} for a file (redirects followed;
// `Range: bytes=N-` resumes a partial download). `Authorization: Bearer {token}` when a token is
// set. Downloads go to `{dest}.part`, are hashed while written and renamed onto `dest` only when
// the size and the sha256 match the listing; a mismatch deletes the partial file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"

namespace tern {

struct HubFile {
  std::string path;
  uint64_t size = 0;
  std::string sha256;  // lowercase hex; empty for files not stored in LFS
};

struct HubOptions {
  std::string endpoint = "https://huggingface.co";  // $HF_ENDPOINT
  std::string token;                                // $HF_TOKEN
  long connect_timeout_s = 30;
  long stall_timeout_s = 60;  // abort when less than 1 byte/s arrives for this long

  // HF_ENDPOINT and HF_TOKEN (or HUGGING_FACE_HUB_TOKEN) from the environment.
  static HubOptions from_environment();
};

// Called with (bytes done, bytes total) while a download runs.
using DownloadProgress = std::function<void(uint64_t, uint64_t)>;

class HubClient {
 public:
  explicit HubClient(HubOptions options);

  // The commit (40 hex digits) that `revision` (a branch, tag or commit) names now:
  // GET {endpoint}/api/models/{repo}/revision/{revision}, its "sha".
  Result<std::string> resolve_revision(const std::string& repo, const std::string& revision) const;

  // Every file of `repo` at `revision` (a branch, tag or commit).
  Result<std::vector<HubFile>> list_files(const std::string& repo,
                                          const std::string& revision) const;

  // Downloads `file` of `repo` to `dest`, resuming `{dest}.part` when present, and verifies it.
  Result<void> download(const std::string& repo, const std::string& revision, const HubFile& file,
                        const std::string& dest, const DownloadProgress& progress = {}) const;

 private:
  Result<std::string> get_api(const std::string& route, const std::string& repo,
                              const std::string& revision) const;

  HubOptions options_;
};

// sha256 of a whole file, lowercase hex.
Result<std::string> sha256_of_file(const std::string& path);

}  // namespace tern
