// The model store: import, list, resolve, remove; names are checked, errors name what exists.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/model_store.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

class ModelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tern-store-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(root_);
    source_ = (root_ / "some-model.gguf").string();
    std::ofstream(source_) << "not really a model, the store does not parse";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
  std::string source_;
};

TEST_F(ModelStoreTest, AddsListsResolvesAndRemoves) {
  ModelStore store((root_ / "home").string());
  EXPECT_TRUE(store.list()->empty());
  auto added = store.add("tiny", {source_}, {"llama", "Q4_0", 1234, ""}, false);
  ASSERT_TRUE(added.ok()) << added.error().message;
  EXPECT_EQ(added->architecture, "llama");
  EXPECT_EQ(added->size_bytes, fs::file_size(source_));

  auto models = store.list();
  ASSERT_EQ(models->size(), 1u);
  EXPECT_EQ((*models)[0].name, "tiny");
  EXPECT_EQ((*models)[0].quantization, "Q4_0");
  EXPECT_EQ((*models)[0].parameter_count, 1234u);
  EXPECT_EQ((*models)[0].source, fs::absolute(source_).string());  // no source given: the path

  auto path = store.resolve_model_file("tiny");
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(fs::path(*path).filename(), "some-model.gguf");
  EXPECT_TRUE(store.resolve_model_file(source_).ok());

  ASSERT_TRUE(store.remove("tiny").ok());
  EXPECT_TRUE(store.list()->empty());
  auto gone = store.resolve_model_file("tiny");
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.error().message.find("unknown model 'tiny'"), std::string::npos);
}

TEST_F(ModelStoreTest, LinksWhenAsked) {
  ModelStore store((root_ / "home").string());
  auto added =
      store.add("linked", {source_}, {"llama", "F16", 1, "hf://org/repo@abc/x.gguf"}, true);
  ASSERT_TRUE(added.ok()) << added.error().message;
  EXPECT_EQ(fs::hard_link_count(source_), 2u);
  EXPECT_EQ(added->source, "hf://org/repo@abc/x.gguf");  // a download records where it came from
}

TEST_F(ModelStoreTest, RejectsBadNamesAndMissingFiles) {
  ModelStore store((root_ / "home").string());
  EXPECT_FALSE(store.add("../escape", {source_}, {}, false).ok());
  EXPECT_FALSE(store.add("", {source_}, {}, false).ok());
  EXPECT_FALSE(store.add("ok", {(root_ / "missing.gguf").string()}, {}, false).ok());
  EXPECT_FALSE(store.resolve_model_file("/no/such/file.gguf").ok());
  auto unknown = store.find("nothing-here");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("tern list"), std::string::npos);
}

}  // namespace
}  // namespace tern
