// HubClient against a real HTTP server on loopback that serves a hub-like tree: the listing
// (/api/models/{repo}/tree/{rev}) and files (/{repo}/resolve/{rev}/{path}) with Range support.
// Covers a clean download, a transfer cut mid-way then resumed, a file whose bytes do not match
// the listed sha256 (refused and deleted), a missing repository and a bearer token.
#include "io/hub_client.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

namespace tern {
namespace {

namespace fs = std::filesystem;

std::string sha256_hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &n, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FakeHub {
 public:
  FakeHub() {
    std::mt19937 rng(5);
    good_.resize(3 * 1024 * 1024 + 17);
    for (char& c : good_) c = static_cast<char>(rng());
    server_.Get(R"(/api/models/org/repo/tree/main)", [this](const auto& req, auto& res) {
      if (!token_.empty() && req.get_header_value("Authorization") != "Bearer " + token_) {
        res.status = 401;
        return;
      }
      const std::string corrupt_sha = sha256_hex(good_);  // listed, but the bytes differ
      res.set_content(fmt::format(R"([{{"type":"directory","path":"sub"}},
        {{"type":"file","path":"README.md","size":5,"oid":"abc"}},
        {{"type":"file","path":"model.gguf","size":{0},"lfs":{{"oid":"{1}","size":{0}}}}},
        {{"type":"file","path":"bad.gguf","size":{0},"lfs":{{"oid":"{2}","size":{0}}}}}])",
                                  good_.size(), sha256_hex(good_), corrupt_sha),
                      "application/json");
    });
    server_.Get(R"(/org/repo/resolve/main/(model|bad)\.gguf)", [this](const auto& req, auto& res) {
      std::string body = good_;
      if (req.matches[1] == "bad") body[body.size() / 2] ^= 1;
      // A resumed request is answered by hand (206 + Content-Range, chunked), so the bytes on
      // the wire are exactly the requested range.
      size_t start = 0;
      if (req.has_header("Range")) {
        start = std::stoul(req.get_header_value("Range").substr(6));
        ++range_requests_;
        res.status = 206;
        res.set_header("Content-Range",
                       fmt::format("bytes {}-{}/{}", start, body.size() - 1, body.size()));
      }
      const size_t cut = cut_after_.exchange(0);
      res.set_chunked_content_provider(
          "application/octet-stream",
          [body, start, cut, sent = size_t{0}](size_t, httplib::DataSink& sink) mutable {
            if (cut != 0 && sent >= cut) return false;  // drop the connection mid-transfer
            if (start + sent >= body.size()) {
              sink.done();
              return true;
            }
            const size_t n = std::min<size_t>(64 * 1024, body.size() - start - sent);
            sink.write(body.data() + start + sent, n);
            sent += n;
            return true;
          });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeHub() {
    server_.stop();
    thread_.join();
  }
  HubOptions options() const {
    HubOptions o;
    o.endpoint = fmt::format("http://127.0.0.1:{}", port_);
    o.stall_timeout_s = 5;
    return o;
  }
  std::string good_;
  std::string token_;
  std::atomic<size_t> cut_after_{0};
  std::atomic<int> range_requests_{0};

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

class HubClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("tern-hub-{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  HubFile find(const std::vector<HubFile>& files, const std::string& path) {
    for (const auto& f : files)
      if (f.path == path) return f;
    ADD_FAILURE() << "no " << path;
    return {};
  }
  fs::path dir_;
};

TEST_F(HubClientTest, ListsFilesWithTheirLfsHashes) {
  FakeHub hub;
  HubClient client(hub.options());
  auto files = client.list_files("org/repo", "main");
  ASSERT_TRUE(files) << files.error().message;
  ASSERT_EQ(files->size(), 3u);  // the directory is not a file
  const HubFile model = find(*files, "model.gguf");
  EXPECT_EQ(model.size, hub.good_.size());
  EXPECT_EQ(model.sha256, sha256_hex(hub.good_));
  EXPECT_TRUE(find(*files, "README.md").sha256.empty());
}

TEST_F(HubClientTest, DownloadsVerifiesAndRenames) {
  FakeHub hub;
  HubClient client(hub.options());
  auto files = client.list_files("org/repo", "main");
  ASSERT_TRUE(files);
  const std::string dest = (dir_ / "model.gguf").string();
  uint64_t last = 0;
  auto ok = client.download("org/repo", "main", find(*files, "model.gguf"), dest,
                            [&](uint64_t done, uint64_t) { last = done; });
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(read_all(dest), hub.good_);
  EXPECT_EQ(last, hub.good_.size());
  EXPECT_FALSE(fs::exists(dest + ".part"));
  EXPECT_EQ(*sha256_of_file(dest), sha256_hex(hub.good_));
}

TEST_F(HubClientTest, AnInterruptedDownloadResumesFromWhereItStopped) {
  FakeHub hub;
  HubClient client(hub.options());
  auto files = client.list_files("org/repo", "main");
  ASSERT_TRUE(files);
  const HubFile model = find(*files, "model.gguf");
  const std::string dest = (dir_ / "model.gguf").string();
  hub.cut_after_ = 1024 * 1024;
  auto first = client.download("org/repo", "main", model, dest);
  ASSERT_FALSE(first);
  EXPECT_NE(first.error().message.find("resume"), std::string::npos) << first.error().message;
  EXPECT_FALSE(fs::exists(dest));  // nothing that looks complete
  ASSERT_TRUE(fs::exists(dest + ".part"));
  const auto partial = fs::file_size(dest + ".part");
  EXPECT_GE(partial, 1024u * 1024u);
  EXPECT_LT(partial, hub.good_.size());
  auto second = client.download("org/repo", "main", model, dest);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(hub.range_requests_, 1);
  EXPECT_EQ(read_all(dest), hub.good_);
}

TEST_F(HubClientTest, ACorruptedFileIsRefusedAndDeleted) {
  FakeHub hub;
  HubClient client(hub.options());
  auto files = client.list_files("org/repo", "main");
  ASSERT_TRUE(files);
  const std::string dest = (dir_ / "bad.gguf").string();
  auto ok = client.download("org/repo", "main", find(*files, "bad.gguf"), dest);
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().message.find("sha256"), std::string::npos) << ok.error().message;
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(fs::exists(dest + ".part"));
}

TEST_F(HubClientTest, MissingRepositoriesAndTokens) {
  FakeHub hub;
  HubClient client(hub.options());
  auto missing = client.list_files("org/nothing", "main");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("no repository"), std::string::npos);

  hub.token_ = "secret";
  auto refused = client.list_files("org/repo", "main");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("HF_TOKEN"), std::string::npos);
  HubOptions with_token = hub.options();
  with_token.token = "secret";
  EXPECT_TRUE(HubClient(with_token).list_files("org/repo", "main"));

  HubOptions unreachable;
  unreachable.endpoint = "http://127.0.0.1:1";
  EXPECT_FALSE(HubClient(unreachable).list_files("org/repo", "main"));
}

}  // namespace
}  // namespace tern
