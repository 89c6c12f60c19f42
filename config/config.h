// config/config.h — the server's configuration as CouchDB keeps it: ini files read in order (a later
// file overrides an earlier one), values changed at run time through the config API, and those
// changes written back to the last file (CouchDB's local.ini).
//
// The text format is CouchDB's (config.erl parse_ini): "[section]" lines, "key = value" lines, ';'
// starts a comment at the beginning of a line or after a space or tab, blank lines are ignored,
// lines before the first section are ignored. Writing back keeps every other line of the file
// (config_writer.erl): the key's line is replaced, or added at the end of its section.
//
// Values are strings here; what a value means and which values are valid is settings.h's business.
// Thread-safe: readers get consistent snapshots; generation() changes after every change so a
// reader can cache what it derived from a snapshot.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace chaise::config {

// Section -> key -> value, sorted (the order CouchDB's GET /_node/_local/_config answers in).
using Sections = std::map<std::string, std::map<std::string, std::string>, std::less<>>;

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses ini text (see above). Never throws: CouchDB skips what it cannot parse.
Sections parse_ini(std::string_view text);

// Rewrites `path` so that [section] key has `value` (nullopt: the key's line is removed), keeping
// every other line. Creates the file (and its directory) when missing. Written to a temporary file,
// fsynced and renamed, so a crash leaves the old or the new file. Throws ConfigError on I/O errors.
void save_to_file(const std::filesystem::path& path, std::string_view section, std::string_view key,
                  const std::optional<std::string>& value);

class Config {
 public:
  // Reads `files` in order (each must exist and be readable, except the last, which is created
  // when first written). Changes made with persist=true go to the last file; with no files they
  // are kept in memory only. Throws ConfigError when a file cannot be read.
  explicit Config(std::vector<std::filesystem::path> files);
  // Values only, nothing read or written (tests, tools).
  explicit Config(Sections values);

  using Snapshot = std::shared_ptr<const Sections>;
  Snapshot snapshot() const;
  std::optional<std::string> get(std::string_view section, std::string_view key) const;

  // Sets a value; returns the previous one. With persist, the writable file is updated first and a
  // failure to write (ConfigError) leaves the value unchanged.
  std::optional<std::string> set(const std::string& section, const std::string& key,
                                 const std::string& value, bool persist = true);
  // Sets a value that no file holds and that stays over a reload: command-line settings, and
  // values that could not be written to the file.
  void pin(const std::string& section, const std::string& key, const std::string& value);
  // Removes a value; returns the removed one (nullopt: there was none, nothing changed).
  std::optional<std::string> remove(const std::string& section, const std::string& key,
                                    bool persist = true);

  // The files' values as they are now (ConfigError when one cannot be read), and replacing every
  // value with them: what POST /_node/{node}/_config/_reload does (values set without persisting
  // are gone after it; pinned ones stay). replace() returns what changed (value nullopt: removed).
  struct Change {
    std::string section;
    std::string key;
    std::optional<std::string> value;
  };
  Sections read_files() const;
  std::vector<Change> replace(Sections values);

  // Changes after every set/remove/replace. Starts at 1.
  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // The file changes are written to (empty: none).
  const std::filesystem::path& writable_file() const { return writable_; }

 private:
  const std::vector<std::filesystem::path> files_;
  mutable std::mutex mutex_;
  Snapshot values_;
  Sections pinned_;  // guarded by mutex_
  std::filesystem::path writable_;
  std::atomic<std::uint64_t> generation_{1};
};

}  // namespace chaise::config
