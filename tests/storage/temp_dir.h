// tests/storage/temp_dir.h — a fresh directory for one test's store, removed with everything in
// it. Shared by the storage tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace chaise::storage {

class TempDir {
 public:
  // Under the system temp dir, named chaise-<tag>-XXXXXX. Aborts if it cannot be made.
  explicit TempDir(std::string_view tag = "store") {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / ("chaise-" + std::string(tag) + "-XXXXXX"))
            .string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace chaise::storage
