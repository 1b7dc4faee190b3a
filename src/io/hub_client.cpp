#include "io/hub_client.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

namespace tern {
namespace {

namespace fs = std::filesystem;

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
  ~CurlGlobal() { curl_global_cleanup(); }
};

void ensure_curl() {
  static CurlGlobal global;
}

using CurlHandle = std::unique_ptr<CURL, decltype(&curl_easy_cleanup)>;
using HeaderList = std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)>;
using Digest = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

std::string hex(const unsigned char* bytes, unsigned int n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

std::string finish_digest(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  return hex(md, n);
}

// Percent-encodes a repository path segment by segment ('/' kept).
std::string encode_path(CURL* curl, const std::string& path) {
  std::string out;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const std::string part =
        path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    char* escaped = curl_easy_escape(curl, part.c_str(), static_cast<int>(part.size()));
    out += escaped;
    curl_free(escaped);
    if (slash == std::string::npos) break;
    out += '/';
    start = slash + 1;
  }
  return out;
}

HeaderList auth_headers(const HubOptions& options, const std::string& extra = {}) {
  curl_slist* list = nullptr;
  if (!options.token.empty())
    list = curl_slist_append(list, ("Authorization: Bearer " + options.token).c_str());
  if (!extra.empty()) list = curl_slist_append(list, extra.c_str());
  return HeaderList(list, curl_slist_free_all);
}

void common_options(CURL* curl, const HubOptions& options) {
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, options.connect_timeout_s);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, options.stall_timeout_s);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "tern/0.1");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
}

size_t append_to_string(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

struct DownloadState {
  std::FILE* out = nullptr;
  EVP_MD_CTX* digest = nullptr;
  uint64_t done = 0;
  uint64_t total = 0;
  bool restart = false;  // the server ignored the Range: start over from byte 0
  bool checked_status = false;
  CURL* curl = nullptr;
  uint64_t offset = 0;
  const DownloadProgress* progress = nullptr;
};

size_t write_download(char* data, size_t size, size_t count, void* user) {
  auto& s = *static_cast<DownloadState*>(user);
  const size_t n = size * count;
  if (!s.checked_status) {
    s.checked_status = true;
    long status = 0;
    curl_easy_getinfo(s.curl, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 400) return 0;  // the body is an error page; the caller reports the status
    if (s.offset > 0 && status == 200) {
      // A full response to a Range request: discard what we had.
      if (std::fseek(s.out, 0, SEEK_SET) != 0) return 0;
      EVP_DigestInit_ex(s.digest, EVP_sha256(), nullptr);
      s.done = 0;
      s.restart = true;
    }
  }
  if (std::fwrite(data, 1, n, s.out) != n) return 0;
  EVP_DigestUpdate(s.digest, data, n);
  s.done += n;
  if (s.progress && *s.progress) (*s.progress)(s.done, s.total);
  return n;
}

Result<void> hash_existing(const std::string& path, uint64_t bytes, EVP_MD_CTX* digest) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return make_error("cannot read {}", path);
  std::vector<char> buffer(1 << 20);
  uint64_t left = bytes;
  while (left > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(left, buffer.size()));
    const size_t got = std::fread(buffer.data(), 1, want, f);
    if (got == 0) break;
    EVP_DigestUpdate(digest, buffer.data(), got);
    left -= got;
  }
  std::fclose(f);
  if (left != 0) return make_error("cannot read {} (short read)", path);
  return ok_result();
}

}  // namespace

HubOptions HubOptions::from_environment() {
  HubOptions options;
  if (const char* e = std::getenv("HF_ENDPOINT"); e != nullptr && *e != '\0') {
    options.endpoint = e;
    while (!options.endpoint.empty() && options.endpoint.back() == '/') options.endpoint.pop_back();
  }
  if (const char* t = std::getenv("HF_TOKEN"); t != nullptr && *t != '\0') {
    options.token = t;
  } else if (const char* t2 = std::getenv("HUGGING_FACE_HUB_TOKEN"); t2 != nullptr) {
    options.token = t2;
  }
  return options;
}

HubClient::HubClient(HubOptions options) : options_(std::move(options)) {
  ensure_curl();
}

// GET an API route of the hub; the body of a 200 answer, else an error saying what went wrong.
Result<std::string> HubClient::get_api(const std::string& route, const std::string& repo,
                                       const std::string& revision) const {
  CurlHandle curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return make_error("cannot start an HTTP client");
  const std::string url = options_.endpoint + "/api/models/" + repo + route;
  std::string body;
  HeaderList headers = auth_headers(options_);
  common_options(curl.get(), options_);
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, append_to_string);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &body);
  const CURLcode rc = curl_easy_perform(curl.get());
  if (rc != CURLE_OK) return make_error("{}: {}", url, curl_easy_strerror(rc));
  long status = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status == 401 || status == 403) {
    return make_error("{}: HTTP {} — the repository is gated or private; set HF_TOKEN", url,
                      status);
  }
  if (status == 404) return make_error("{}: no repository {} at revision {}", url, repo, revision);
  if (status != 200) return make_error("{}: HTTP {}", url, status);
  return body;
}

Result<std::string> HubClient::resolve_revision(const std::string& repo,
                                                const std::string& revision) const {
  CurlHandle curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return make_error("cannot start an HTTP client");
  auto body = get_api("/revision/" + encode_path(curl.get(), revision), repo, revision);
  if (!body) return body.error();
  const auto json = nlohmann::json::parse(*body, nullptr, false);
  const std::string sha = json.is_object() ? json.value("sha", "") : "";
  if (sha.size() != 40 || sha.find_first_not_of("0123456789abcdef") != std::string::npos)
    return make_error("{}@{}: the hub's answer names no commit", repo, revision);
  return sha;
}

Result<std::vector<HubFile>> HubClient::list_files(const std::string& repo,
                                                   const std::string& revision) const {
  CurlHandle curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return make_error("cannot start an HTTP client");
  auto body =
      get_api("/tree/" + encode_path(curl.get(), revision) + "?recursive=true", repo, revision);
  if (!body) return body.error();
  const std::string url = options_.endpoint + "/api/models/" + repo + "/tree/" + revision;
  const auto json = nlohmann::json::parse(*body, nullptr, false);
  if (!json.is_array()) return make_error("{}: the hub's answer is not a file list", url);
  std::vector<HubFile> files;
  for (const auto& entry : json) {
    if (!entry.is_object() || entry.value("type", "") != "file") continue;
    HubFile f;
    f.path = entry.value("path", "");
    f.size = entry.value("size", uint64_t{0});
    if (auto lfs = entry.find("lfs"); lfs != entry.end() && lfs->is_object()) {
      f.sha256 = lfs->value("oid", "");
      f.size = lfs->value("size", f.size);
    }
    if (!f.path.empty()) files.push_back(std::move(f));
  }
  return files;
}

Result<void> HubClient::download(const std::string& repo, const std::string& revision,
                                 const HubFile& file, const std::string& dest,
                                 const DownloadProgress& progress) const {
  const std::string part = dest + ".part";
  std::error_code ec;
  uint64_t offset = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
  if (ec) offset = 0;
  if (file.size > 0 && offset > file.size) {
    fs::remove(part, ec);
    offset = 0;
  }
  Digest digest(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(digest.get(), EVP_sha256(), nullptr);
  if (offset > 0) TERN_TRY(hash_existing(part, offset, digest.get()));

  std::FILE* out = std::fopen(part.c_str(), offset > 0 ? "r+b" : "wb");
  if (out == nullptr) return make_error("cannot write {}", part);
  if (offset > 0 && std::fseek(out, static_cast<long>(offset), SEEK_SET) != 0) {
    std::fclose(out);
    return make_error("cannot seek in {}", part);
  }

  CurlHandle curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) {
    std::fclose(out);
    return make_error("cannot start an HTTP client");
  }
  const std::string url = options_.endpoint + "/" + repo + "/resolve/" +
                          encode_path(curl.get(), revision) + "/" +
                          encode_path(curl.get(), file.path);
  long status = 0;
  DownloadState state;
  state.out = out;
  state.digest = digest.get();
  state.done = offset;
  state.total = file.size;
  state.curl = curl.get();
  state.offset = offset;
  state.progress = &progress;
  CURLcode rc = CURLE_OK;
  if (file.size == 0 || offset < file.size) {
    HeaderList headers =
        auth_headers(options_, offset > 0 ? "Range: bytes=" + std::to_string(offset) + "-" : "");
    common_options(curl.get(), options_);
    curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, write_download);
    curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &state);
    rc = curl_easy_perform(curl.get());
    curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
  }
  const bool flushed = std::fflush(out) == 0;
  if (state.restart) {
    // The new body is shorter than what was there only if the old part was bad: cut it.
    fs::resize_file(part, state.done, ec);
  }
  std::fclose(out);
  if (status >= 400) return make_error("{}: HTTP {}", url, status);
  if (rc != CURLE_OK) {
    return make_error("{}: {} after {} of {} bytes; run the same command again to resume", url,
                      curl_easy_strerror(rc), state.done, file.size);
  }
  if (!flushed) return make_error("cannot write {} (disk full?)", part);
  if (file.size > 0 && state.done != file.size) {
    return make_error("{}: got {} bytes, the hub lists {}; run again to resume", url, state.done,
                      file.size);
  }
  const std::string got = finish_digest(digest.get());
  if (!file.sha256.empty() && got != file.sha256) {
    fs::remove(part, ec);
    return make_error("{}: sha256 {} does not match the hub's {}; the download was deleted", url,
                      got, file.sha256);
  }
  fs::rename(part, dest, ec);
  if (ec) return make_error("cannot rename {} to {}: {}", part, dest, ec.message());
  return ok_result();
}

Result<std::string> sha256_of_file(const std::string& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return make_error("cannot read {}: {}", path, ec.message());
  Digest digest(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(digest.get(), EVP_sha256(), nullptr);
  TERN_TRY(hash_existing(path, size, digest.get()));
  return finish_digest(digest.get());
}

}  // namespace tern
