// Opening job paths beneath their roots: no symbolic link below the root is followed,
// wherever it sits, and folders are created the same way.
#include "common/fs/open_beneath.h"
#include "common/fs/open_matches_beneath.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fp8::fs_confined {
namespace {

namespace fs = std::filesystem;

class OpenBeneathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("fp8_open_beneath_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "data");
    std::ofstream(root_ / "data" / "corpus.txt") << "text";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(OpenBeneathTest, OpensAPlainFileAndReadsIt) {
  absl::StatusOr<UniqueFd> fd = open_file_beneath(root_, root_ / "data" / "corpus.txt", "data.path");
  ASSERT_TRUE(fd.ok()) << fd.status();
  std::ifstream via_fd(fd_path(fd->get()));
  std::string text;
  via_fd >> text;
  EXPECT_EQ(text, "text");
}

TEST_F(OpenBeneathTest, LinksBelowTheRootAreNotFollowed) {
  fs::create_symlink("/etc/passwd", root_ / "data" / "passwd");
  fs::create_symlink("/etc", root_ / "etc");
  for (const fs::path& p : {root_ / "data" / "passwd", root_ / "etc" / "passwd"}) {
    absl::StatusOr<UniqueFd> fd = open_file_beneath(root_, p, "data.path");
    ASSERT_FALSE(fd.ok()) << p;
    EXPECT_NE(fd.status().message().find("is a symbolic link"), std::string::npos) << fd.status();
    EXPECT_EQ(fd.status().message().rfind("data.path: ", 0), 0u) << fd.status();
  }
  EXPECT_FALSE(open_file_beneath(root_, root_ / "data" / ".." / "data" / "corpus.txt", "data.path").ok());
  EXPECT_FALSE(open_file_beneath(root_, "/etc/passwd", "data.path").ok());
  EXPECT_FALSE(open_file_beneath(root_, root_ / "data", "data.path").ok());  // a folder
}

// A pattern's matches, in name order, each opened as one file is: a link among them fails
// the whole pattern.
TEST_F(OpenBeneathTest, EveryMatchOfAPatternIsOpenedBeneathTheRoot) {
  EXPECT_TRUE(is_glob_pattern("/data/train-*.tokens"));
  EXPECT_FALSE(is_glob_pattern("/data/train.tokens"));
  std::ofstream(root_ / "data" / "b.tokens") << "b";
  std::ofstream(root_ / "data" / "a.tokens") << "a";
  absl::StatusOr<OpenMatches> m = open_matches_beneath(root_, (root_ / "data" / "*.tokens").string(), "data.path");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->paths[0], (root_ / "data" / "a.tokens").string());
  std::ifstream first(fd_path(m->files[0].get()));
  std::string text;
  first >> text;
  EXPECT_EQ(text, "a");
  EXPECT_EQ(open_matches_beneath(root_, (root_ / "data" / "*.md").string(), "data.path").status().code(),
            absl::StatusCode::kNotFound);
  fs::create_symlink("/etc/passwd", root_ / "data" / "c.tokens");
  absl::StatusOr<OpenMatches> linked = open_matches_beneath(root_, (root_ / "data" / "*.tokens").string(), "data.path");
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(linked.status().message().find("is a symbolic link"), std::string::npos) << linked.status();
  EXPECT_FALSE(open_matches_beneath(root_, "/etc/*", "data.path").ok());
}

TEST_F(OpenBeneathTest, MakesFoldersBeneathTheRootAndNowhereElse) {
  absl::StatusOr<UniqueFd> dir = make_dirs_beneath(root_, root_ / "ckpt" / "alice" / "job-1", "checkpoint.dir");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(fs::is_directory(root_ / "ckpt" / "alice" / "job-1"));
  std::ofstream(fd_path(dir->get()) / "written") << "x";  // writes through the opened folder
  EXPECT_TRUE(fs::exists(root_ / "ckpt" / "alice" / "job-1" / "written"));
  EXPECT_TRUE(make_dirs_beneath(root_, root_ / "ckpt" / "alice" / "job-1", "checkpoint.dir").ok());  // again

  fs::create_directories(root_ / "outside");
  fs::create_symlink(root_ / "outside", root_ / "ckpt" / "bob");
  absl::StatusOr<UniqueFd> escaped = make_dirs_beneath(root_, root_ / "ckpt" / "bob" / "job-2", "checkpoint.dir");
  ASSERT_FALSE(escaped.ok());
  EXPECT_NE(escaped.status().message().find("is a symbolic link"), std::string::npos) << escaped.status();
  EXPECT_FALSE(fs::exists(root_ / "outside" / "job-2"));
}

TEST(IsBeneathTest, LexicalCheck) {
  EXPECT_TRUE(is_beneath("/data", "/data/a/b"));
  EXPECT_TRUE(is_beneath("/data/", "/data/a"));
  EXPECT_FALSE(is_beneath("/data", "/database/a"));
  EXPECT_FALSE(is_beneath("/data", "/data/../etc"));
  EXPECT_FALSE(is_beneath("/data", "relative"));
}

}  // namespace
}  // namespace fp8::fs_confined
