// FileStore: values round trip, waits time out naming what is missing, replacing a value is
// atomic for readers, and keys with any bytes map to distinct, safe file names.
#include "worker/engine/collectives/file_store.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/engine/collectives/scratch_dir.h"

namespace fp8::engine::collectives {
namespace {

using test::ScratchDir;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(scratch_.ok());
    dir_ = scratch_.path() / "nested" / "rdzv";  // missing: open() creates it
    auto store = FileStore::open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) names.push_back(entry.path().filename());
    return names;
  }

  ScratchDir scratch_;
  std::filesystem::path dir_;
  std::unique_ptr<FileStore> store_;
};

TEST_F(FileStoreTest, OpenCreatesTheDirectoryAndDescribesIt) {
  EXPECT_TRUE(std::filesystem::is_directory(dir_));
  EXPECT_EQ(store_->describe(), "file store " + dir_.string());
}

TEST_F(FileStoreTest, OpenRejectsAPathThatIsAFile) {
  const auto file = scratch_.path() / "plain-file";
  std::ofstream(file) << "x";
  auto store = FileStore::open(file);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(store.status().message(), file.string())) << store.status();

  auto below = FileStore::open(file / "sub");  // a parent is a file: cannot be created
  ASSERT_FALSE(below.ok());
  EXPECT_EQ(below.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(below.status().message(), "cannot create directory")) << below.status();
}

TEST_F(FileStoreTest, SetThenGetContainsAndWait) {
  auto before = store_->contains("job-7/attempt-2/x");
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_FALSE(*before);

  ASSERT_TRUE(store_->set("job-7/attempt-2/x", "hello").ok());
  auto after = store_->contains("job-7/attempt-2/x");
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(*after);
  auto value = store_->get("job-7/attempt-2/x", absl::Seconds(1));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "hello");
  EXPECT_TRUE(store_->wait({"job-7/attempt-2/x"}, absl::ZeroDuration()).ok());
  EXPECT_TRUE(store_->wait({}, absl::ZeroDuration()).ok());

  // Replacing, binary values, empty values.
  const std::string binary("a\0b\xff\n", 5);
  ASSERT_TRUE(store_->set("job-7/attempt-2/x", binary).ok());
  EXPECT_EQ(*store_->get("job-7/attempt-2/x", absl::ZeroDuration()), binary);
  ASSERT_TRUE(store_->set("empty", "").ok());
  EXPECT_EQ(*store_->get("empty", absl::ZeroDuration()), "");
}

TEST_F(FileStoreTest, GetWaitsForAValueSetLater) {
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(30));
    ASSERT_TRUE(store_->set("late", "arrived").ok());
  });
  auto value = store_->get("late", absl::Seconds(10));
  writer.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "arrived");
}

TEST_F(FileStoreTest, WaitReturnsOnceEveryKeyIsSet) {
  ASSERT_TRUE(store_->set("a", "1").ok());
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(store_->set("b", "2").ok());
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(store_->set("c", "3").ok());
  });
  const absl::Status waited = store_->wait({"a", "b", "c"}, absl::Seconds(10));
  writer.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST_F(FileStoreTest, GetTimesOutNamingTheKeyAndTheDirectory) {
  auto value = store_->get("job-7/never", absl::Milliseconds(30));
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(value.status().message(), "'job-7/never'")) << value.status();
  EXPECT_TRUE(absl::StrContains(value.status().message(), dir_.string())) << value.status();
}

TEST_F(FileStoreTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  ASSERT_TRUE(store_->set("present", "").ok());
  const absl::Status waited = store_->wait({"present", "missing-1", "missing-2"}, absl::Milliseconds(30));
  ASSERT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_TRUE(absl::StrContains(waited.message(), "'missing-1', 'missing-2'")) << waited;
  EXPECT_FALSE(absl::StrContains(waited.message(), "'present'")) << waited;
  EXPECT_TRUE(absl::StrContains(waited.message(), dir_.string())) << waited;
}

TEST_F(FileStoreTest, OddKeysMapToDistinctSafeFileNames) {
  const std::vector<std::string> keys = {
      "job-7/attempt-2/gloo/0", "a b", "caf\xc3\xa9", ".", "..", "%41", "A", "k", "k.tmp.1.2", "k/", "/k",
      std::string("nul\0byte", 8), "tab\tnew\nline", "x:y*z?\"<>|\\"};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(store_->set(keys[i], "value " + std::to_string(i)).ok()) << "key #" << i;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    auto value = store_->get(keys[i], absl::ZeroDuration());
    ASSERT_TRUE(value.ok()) << "key #" << i << ": " << value.status();
    EXPECT_EQ(*value, "value " + std::to_string(i)) << "key #" << i;
  }
  // One flat file per key, named only with [A-Za-z0-9_%-]: no subdirectories, no dot files,
  // and no leftover temporary files.
  const std::vector<std::string> names = files();
  EXPECT_EQ(names.size(), keys.size());
  for (const std::string& name : names) {
    EXPECT_EQ(name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_%-"),
              std::string::npos)
        << name;
  }
  EXPECT_EQ(*FileStore::file_name_for("job-7/attempt-2"), "job-7%2Fattempt-2");
}

TEST_F(FileStoreTest, RejectsEmptyAndOverlongKeys) {
  EXPECT_EQ(store_->set("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->get("", absl::ZeroDuration()).status().code(), absl::StatusCode::kInvalidArgument);
  const std::string long_key(300, 'k');
  const absl::Status too_long = store_->set(long_key, "x");
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(too_long.message(), "too long")) << too_long;
  // A bad key fails at once, not after the timeout.
  EXPECT_EQ(store_->wait({"fine", ""}, absl::Hours(1)).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FileStoreTest, ReadersSeeWholeValuesWhileTheyAreReplaced) {
  // Two values of different lengths and contents: a torn read would mix or cut them.
  const std::string first(300000, 'a');
  const std::string second(200001, 'b');
  ASSERT_TRUE(store_->set("shared", first).ok());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < 200 && !stop; ++i) {
      if (!store_->set("shared", (i % 2 == 0) ? second : first).ok()) break;
    }
    stop = true;
  });
  int reads = 0;
  int torn = 0;
  while (!stop) {
    auto value = store_->get("shared", absl::ZeroDuration());
    ASSERT_TRUE(value.ok()) << value.status();
    if (*value != first && *value != second) ++torn;
    ++reads;
  }
  writer.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  EXPECT_EQ(files().size(), 1u) << "temporary files left behind";
}

}  // namespace
}  // namespace fp8::engine::collectives
