// The ini format as CouchDB's config.erl reads it and config_writer.erl rewrites it, and the typed
// settings checks.
#include "config/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "config/settings.h"

namespace chaise::config {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TempFile {
 public:
  TempFile() {
    std::string pattern = (fs::temp_directory_path() / "chaise-config-XXXXXX").string();
    const int fd = ::mkstemp(pattern.data());
    ::close(fd);
    path_ = pattern;
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(ParseIni, CommentsSectionsAndSeparators) {
  const Sections s = parse_ini(
      "ignored = before any section\n"
      "[a]\n"
      "; a comment\n"
      "  k1 = v1 ; trailing comment\n"
      "k2=v2\n"
      "k3 = x=y\n"
      "k4 = with;semicolon\n"
      "empty =\n"
      "[b]\r\n"
      "k = 1\r\n"
      "[]\n"
      "still_b = yes\n"
      "[a]\n"
      "k1 = override\n");
  EXPECT_EQ(s.at("a").at("k1"), "override");
  EXPECT_EQ(s.at("a").at("k2"), "v2");
  EXPECT_EQ(s.at("a").at("k3"), "x=y");
  EXPECT_EQ(s.at("a").at("k4"), "with;semicolon");
  EXPECT_FALSE(s.at("a").contains("empty"));
  EXPECT_EQ(s.at("b").at("k"), "1");
  EXPECT_EQ(s.at("b").at("still_b"), "yes");
  EXPECT_EQ(s.size(), 2u);
}

TEST(SaveToFile, ReplacesAppendsAndRemovesKeepingOtherLines) {
  TempFile f;
  std::ofstream(f.path()) << "; my settings\n[a]\nx = 1\n; keep me\n\n[b]\ny = 2\n";
  save_to_file(f.path(), "a", "x", std::string("10"));
  save_to_file(f.path(), "a", "z", std::string("3"));
  save_to_file(f.path(), "c", "w", std::string("4"));
  save_to_file(f.path(), "b", "y", std::nullopt);
  EXPECT_EQ(read(f.path()), "; my settings\n[a]\nx = 10\n; keep me\nz = 3\n\n[b]\n\n[c]\nw = 4\n");
  EXPECT_EQ(parse_ini(read(f.path())).at("a").at("z"), "3");
}

TEST(ConfigStore, LaterFilesWinAndChangesPersistToTheLast) {
  TempFile base, local;
  std::ofstream(base.path()) << "[s]\nk = base\nonly_base = 1\n";
  std::ofstream(local.path()) << "[s]\nk = local\n";
  Config c(std::vector<fs::path>{base.path(), local.path()});
  EXPECT_EQ(c.get("s", "k"), "local");
  EXPECT_EQ(c.get("s", "only_base"), "1");
  const auto g = c.generation();
  EXPECT_EQ(c.set("s", "new", "v"), std::nullopt);
  EXPECT_GT(c.generation(), g);
  EXPECT_EQ(parse_ini(read(local.path())).at("s").at("new"), "v");
  EXPECT_EQ(parse_ini(read(base.path())).at("s").count("new"), 0u);
  EXPECT_EQ(c.remove("s", "k"), "local");
  EXPECT_EQ(c.get("s", "k"), std::nullopt);
  c.set("s", "mem", "1", /*persist=*/false);
  EXPECT_EQ(parse_ini(read(local.path())).at("s").count("mem"), 0u);
  // A snapshot taken before a change is unaffected by it.
  const auto before = c.snapshot();
  c.set("s", "later", "1", false);
  EXPECT_FALSE(before->at("s").contains("later"));
}

// A reload (POST /_node/{node}/_config/_reload) takes the files as they are now: edits made to
// them appear, values set without persisting go, pinned values (command line) stay; replace()
// names each change once.
TEST(ConfigStore, ReloadTakesTheFilesAndKeepsPinnedValues) {
  TempFile local;
  std::ofstream(local.path()) << "[s]\nk = 1\ngone = x\n";
  Config c(std::vector<fs::path>{local.path()});
  c.pin("chttpd", "port", "7000");
  c.set("s", "memory_only", "1", /*persist=*/false);
  std::ofstream(local.path()) << "[s]\nk = 2\nadded = y\n";  // edited by hand
  const auto g = c.generation();
  auto changes = c.replace(c.read_files());
  EXPECT_GT(c.generation(), g);
  EXPECT_EQ(c.get("s", "k"), "2");
  EXPECT_EQ(c.get("s", "added"), "y");
  EXPECT_EQ(c.get("s", "gone"), std::nullopt);
  EXPECT_EQ(c.get("s", "memory_only"), std::nullopt);
  EXPECT_EQ(c.get("chttpd", "port"), "7000");
  std::map<std::string, std::optional<std::string>> changed;
  for (const auto& ch : changes) {
    EXPECT_TRUE(changed.emplace(ch.section + "/" + ch.key, ch.value).second) << ch.key;
  }
  EXPECT_EQ(changed,
            (std::map<std::string, std::optional<std::string>>{{"s/k", "2"},
                                                               {"s/added", "y"},
                                                               {"s/gone", std::nullopt},
                                                               {"s/memory_only", std::nullopt}}));
}

TEST(Settings, ValidatesKnownKeysAndWarnsAboutUnknownOnes) {
  std::vector<std::string> warnings;
  Sections values;
  values["chttpd"]["port"] = "6000";
  values["couchdb"]["max_attachment_size"] = "infinity";
  values["log"]["level"] = "warning";
  values["weird"]["thing"] = "1";
  const ServerSettings s = server_settings(values, warnings);
  EXPECT_EQ(s.port, 6000);
  EXPECT_EQ(s.max_attachment_size, std::numeric_limits<std::size_t>::max());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("[weird] thing"), std::string::npos);

  values["chttpd"]["port"] = "70000";
  EXPECT_THROW(server_settings(values, warnings), ConfigError);
  values["chttpd"]["port"] = "1";
  values["chaise"]["port"] = "1";  // the old layout: named where it moved
  try {
    server_settings(values, warnings);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("[chttpd] port"), std::string::npos) << e.what();
  }
  EXPECT_EQ(validate("chttpd_auth", "same_site", "lax"), std::nullopt);
  EXPECT_NE(validate("chttpd_auth", "same_site", "sideways"), std::nullopt);
  EXPECT_NE(validate("couch_httpd_auth", "timeout", "-1"), std::nullopt);
  EXPECT_EQ(validate("admins", "anyone", "anything"), std::nullopt);
}

// Threads: 0 is automatic, one per core with the embedded store, more on FoundationDB, where a
// request waits for the cluster on its thread; a number given stays.
TEST(Settings, ThreadsDependOnTheStorageEngineUnlessGiven) {
  std::vector<std::string> warnings;
  Sections values;
  EXPECT_EQ(server_settings(values, warnings).io_threads, 0u);
  EXPECT_EQ(server_settings(values, warnings).worker_threads, 0u);
  values["chaise"]["storage_engine"] = "foundationdb";
  EXPECT_EQ(server_settings(values, warnings).io_threads, kFoundationDbIoThreads);
  EXPECT_EQ(server_settings(values, warnings).worker_threads, kFoundationDbWorkerThreads);
  values["chaise"]["io_threads"] = "3";
  values["chaise"]["worker_threads"] = "0";
  EXPECT_EQ(server_settings(values, warnings).io_threads, 3u);
  EXPECT_EQ(server_settings(values, warnings).worker_threads, kFoundationDbWorkerThreads);
}

}  // namespace
}  // namespace chaise::config
