// file_write_check: each reason a file cannot be written at a path, the
// directory it names, and that the check leaves nothing behind. The readers'
// open: anything but a regular file (a FIFO, /dev/zero, a directory) is
// refused at once, never waited on or read forever; whole reads are bounded.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/files/file_io.h"

namespace fs = std::filesystem;

namespace {

class FileWriteCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("fsdpgen_file_io_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "adir");
    std::ofstream(root_ / "file") << "a file, not a directory\n";
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string at(const std::string& name) const { return (root_ / name).string(); }
  fs::path root_;
};

TEST_F(FileWriteCheck, AWritablePathHasNoProblemAndTheProbeIsRemoved) {
  const file_write_problem p = file_write_check(at("out.json"));
  EXPECT_EQ(p.what, file_write_problem::none);
  EXPECT_EQ(p.dir, root_.string());
  EXPECT_FALSE(fs::exists(at("out.json")));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(root_))
    ++entries;
  EXPECT_EQ(entries, 2) << "only adir and file";
}

TEST_F(FileWriteCheck, ABareNameIsInTheCurrentDirectory) {
  EXPECT_EQ(file_write_check("out.json").dir, ".");
}

TEST_F(FileWriteCheck, EachProblemNamesTheDirectory) {
  const file_write_problem dir = file_write_check(at("adir"));
  EXPECT_EQ(dir.what, file_write_problem::is_directory);
  const file_write_problem missing = file_write_check(at("missing/out.json"));
  EXPECT_EQ(missing.what, file_write_problem::no_directory);
  EXPECT_EQ(missing.dir, at("missing"));
  const file_write_problem file = file_write_check(at("file/out.json"));
  EXPECT_EQ(file.what, file_write_problem::not_a_directory);
  EXPECT_EQ(file.dir, at("file"));
}

// Permission bits do not bind root; /proc refuses the creation even so.
TEST_F(FileWriteCheck, ADirectoryNoFileCanBeCreatedInIsRefusedEvenForRoot) {
  const file_write_problem p = file_write_check("/proc/out.json");
  EXPECT_EQ(p.what, file_write_problem::cannot_create);
  EXPECT_EQ(p.dir, "/proc");
  EXPECT_FALSE(p.error.empty());
}

TEST_F(FileWriteCheck, AnExistingFileThisProcessMayNotWriteIsRefused) {
  if (geteuid() == 0) GTEST_SKIP() << "root may write any file";
  fs::permissions(at("file"), fs::perms::owner_read);
  const file_write_problem p = file_write_check(at("file"));
  EXPECT_EQ(p.what, file_write_problem::cannot_open);
  EXPECT_FALSE(p.error.empty());
}

// What a reader's error says about `path`.
std::string open_error(const std::string& path) {
  try {
    file_read_whole(path, 1 << 20);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(FileWriteCheck, ReadersRefuseWhatIsNotARegularFileAtOnce) {
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  EXPECT_EQ(open_error(at("fifo")), at("fifo") + ": not a regular file (a FIFO)");
  EXPECT_EQ(open_error("/dev/zero"), "/dev/zero: not a regular file (a character device)");
  EXPECT_EQ(open_error(at("adir")), at("adir") + ": not a regular file (a directory)");
  EXPECT_EQ(open_error(at("none")), at("none") + ": cannot open: No such file or directory");
  EXPECT_EQ(file_read_whole(at("file"), 1 << 20), "a file, not a directory\n");
  int64_t size = 0;
  const int fd = file_open_regular(at("file"), &size);
  EXPECT_EQ(size, 24);
  ::close(fd);
  try {
    file_read_whole(at("file"), 10);
    ADD_FAILURE() << "a file over the limit was read";
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()),
              at("file") + ": 24 bytes, more than the 10 bytes this reads whole");
  }
}

}  // namespace
