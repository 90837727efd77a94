// MemEnv, the simulator's disk (runtime/io/mem_env.hpp): a crash keeps
// exactly what was synced, faults fail an operation without changing
// anything, and locks die with the crash.
#include "runtime/io/mem_env.hpp"

#include <gtest/gtest.h>

#include <string>

namespace accord {
namespace {

std::span<const std::byte> bytes_of(const std::string& text) { return std::as_bytes(std::span(text)); }

std::string text_of(MemEnv& env, const std::filesystem::path& path) {
  auto bytes = env.read_file(path, 1 << 20);
  if (!bytes) return "<" + bytes.error().message() + ">";
  return std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size());
}

TEST(MemEnvTest, ACrashKeepsOnlyWhatWasSynced) {
  MemEnv env;
  ASSERT_TRUE(env.create_folder("/d"));
  ASSERT_TRUE(env.sync_folder("/"));
  ASSERT_TRUE(env.write_file("/d/unsynced", bytes_of("a"), true));
  ASSERT_TRUE(write_file_synced(env, "/d/synced", bytes_of("b")));
  ASSERT_TRUE(write_file_synced(env, "/d/durable", bytes_of("c")));
  ASSERT_TRUE(env.sync_folder("/d"));
  ASSERT_TRUE(env.write_file("/d/durable", bytes_of("changed"), false));
  ASSERT_TRUE(env.write_file("/d/late", bytes_of("d"), true));
  env.crash();
  EXPECT_EQ(env.type_of("/d/late"), FileType::none);
  EXPECT_EQ(text_of(env, "/d/durable"), "c");
  // Synced names made durable before the bytes were written: empty files.
  EXPECT_EQ(text_of(env, "/d/unsynced"), "");
  EXPECT_EQ(text_of(env, "/d/synced"), "b");
}

TEST(MemEnvTest, ARenameIsDurableOnlyOnceItsFolderIsSynced) {
  MemEnv env;
  ASSERT_TRUE(write_file_synced(env, "/old", bytes_of("old")));
  ASSERT_TRUE(env.sync_folder("/"));
  ASSERT_TRUE(replace_file_atomically(env, "/f", "one"));
  ASSERT_TRUE(env.rename("/old", "/moved"));
  env.crash();
  EXPECT_EQ(text_of(env, "/f"), "one");  // replace_file_atomically syncs its folder
  EXPECT_EQ(env.type_of("/moved"), FileType::none);
  EXPECT_EQ(text_of(env, "/old"), "old");
}

TEST(MemEnvTest, AnInjectedFaultFailsTheOperationAndChangesNothing) {
  MemEnv env;
  ASSERT_TRUE(write_file_synced(env, "/a", bytes_of("a")));
  env.set_fault_hook([](std::string_view operation, const std::filesystem::path&) { return operation == "rename"; });
  const Status failed = env.rename("/a", "/b");
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), ErrorCode::io);
  EXPECT_NE(failed.error().message().find("injected disk fault: rename /a"), std::string::npos);
  EXPECT_EQ(text_of(env, "/a"), "a");
  EXPECT_EQ(env.type_of("/b"), FileType::none);
}

TEST(MemEnvTest, ExclusiveWritesRemovalsAndRenamesFollowPosix) {
  MemEnv env;
  ASSERT_TRUE(env.write_file("/f", bytes_of("x"), true));
  EXPECT_FALSE(env.write_file("/f", bytes_of("y"), true));
  EXPECT_FALSE(env.write_file("/missing/f", bytes_of("y"), false));
  ASSERT_TRUE(env.create_folder("/d"));
  ASSERT_TRUE(env.write_file("/d/f", bytes_of("z"), true));
  EXPECT_FALSE(env.remove("/d"));  // not empty
  EXPECT_FALSE(env.rename("/f", "/d"));
  EXPECT_FALSE(env.rename("/d", "/d/below"));
  EXPECT_TRUE(env.remove("/nothing"));
  EXPECT_EQ(env.entries("/"), (std::vector<std::string>{"d", "f"}));
  EXPECT_FALSE(env.read_file("/d/f", 0));  // larger than allowed
}

TEST(MemEnvTest, ACrashReleasesLocksAndAnOldLockCannotReleaseANewOne) {
  MemEnv env;
  auto first = env.try_lock("/LOCK");
  ASSERT_TRUE(first && *first);
  auto second = env.try_lock("/LOCK");
  ASSERT_TRUE(second);
  EXPECT_EQ(*second, nullptr);
  env.crash();
  auto after = env.try_lock("/LOCK");
  ASSERT_TRUE(after && *after);
  first->reset();  // the dead holder's lock goes
  auto again = env.try_lock("/LOCK");
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, nullptr);
}

TEST(MemEnvTest, FoldersAreCreatedDurably) {
  MemEnv env;
  ASSERT_TRUE(create_folders_synced(env, "/a/b/c/"));
  env.crash();
  EXPECT_EQ(env.type_of("/a/b/c"), FileType::folder);
}

}  // namespace
}  // namespace accord
