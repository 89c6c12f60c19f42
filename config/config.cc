#include "config/config.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace chaise::config {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSpaces = " \t\r\n\v\f";

std::string_view trim(std::string_view s) {
  const auto begin = s.find_first_not_of(kSpaces);
  if (begin == std::string_view::npos) return {};
  const auto end = s.find_last_not_of(kSpaces);
  return s.substr(begin, end - begin + 1);
}

// config.erl remove_comments: a trimmed line starting with ';' is a comment; otherwise everything
// from the first " ;" or "\t;" on.
std::string_view remove_comment(std::string_view line) {
  line = trim(line);
  if (!line.empty() && line.front() == ';') return {};
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == ';' && (line[i - 1] == ' ' || line[i - 1] == '\t')) return line.substr(0, i - 1);
  }
  return line;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n' || text[i] == '\r' || text[i] == '\032') {
      lines.push_back(text.substr(start, i - start));
      if (i + 1 < text.size() && text[i] == '\r' && text[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  return lines;
}

// "[name]" -> name; anything else (including "[]" or "[a]b") -> nullopt.
std::optional<std::string_view> section_header(std::string_view line) {
  if (line.size() < 3 || line.front() != '[') return std::nullopt;
  const auto close = line.find(']');
  if (close == std::string_view::npos || close != line.size() - 1 || close == 1)
    return std::nullopt;
  return line.substr(1, close - 1);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot read " + path.string() + ": " + std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void fsync_fd_path(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw ConfigError("open " + path.string() + ": " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw ConfigError("fsync " + path.string() + ": " + std::strerror(saved));
}

}  // namespace

Sections parse_ini(std::string_view text) {
  Sections sections;
  std::string section;
  for (std::string_view raw : split_lines(text)) {
    const std::string_view line = trim(remove_comment(raw));
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (const auto name = section_header(line)) section = std::string(*name);
      continue;
    }
    if (section.empty()) continue;
    // " = " first, so a key may contain '='; then a bare '='.
    std::size_t eq = line.find(" = ");
    std::size_t value_at = eq == std::string_view::npos ? 0 : eq + 3;
    if (eq == std::string_view::npos) {
      eq = line.find('=');
      if (eq == std::string_view::npos || eq == 0) continue;
      value_at = eq + 1;
    }
    const std::string_view key = trim(line.substr(0, eq));
    const std::string_view value = trim(line.substr(value_at));
    if (key.empty() || value.empty()) continue;
    sections[section][std::string(key)] = std::string(value);
  }
  return sections;
}

void save_to_file(const fs::path& path, std::string_view section, std::string_view key,
                  const std::optional<std::string>& value) {
  std::string old_text;
  if (fs::exists(path)) old_text = read_file(path);
  std::vector<std::string> lines;
  for (std::string_view line : split_lines(old_text)) lines.emplace_back(line);
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();

  const std::string new_line = value ? std::string(key) + " = " + *value : std::string();
  // Index of the section's header, then of the key's line or the section's end.
  std::optional<std::size_t> header;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto name = section_header(trim(lines[i]));
    if (name && *name == section) {
      header = i;
      break;
    }
  }
  if (!header) {
    if (value) {
      if (!lines.empty()) lines.emplace_back();
      lines.push_back("[" + std::string(section) + "]");
      lines.push_back(new_line);
    }
  } else {
    std::size_t end = lines.size();
    std::optional<std::size_t> found;
    for (std::size_t i = *header + 1; i < lines.size(); ++i) {
      const std::string_view line = trim(lines[i]);
      if (section_header(line)) {
        end = i;
        break;
      }
      if (!line.empty() && line.front() != ';' && line.substr(0, key.size()) == key) {
        const std::string_view rest = trim(line.substr(key.size()));
        if (!rest.empty() && rest.front() == '=') found = i;
      }
    }
    if (found) {
      if (value) {
        lines[*found] = new_line;
      } else {
        lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(*found));
      }
    } else if (value) {
      // After the section's last non-blank line.
      std::size_t at = end;
      while (at > *header + 1 && trim(lines[at - 1]).empty()) --at;
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), new_line);
    }
  }

  std::string text;
  for (const auto& line : lines) text.append(line).push_back('\n');
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  const fs::path temp = path.string() + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw ConfigError("cannot write " + temp.string());
  }
  fsync_fd_path(temp, O_RDONLY);
  fs::rename(temp, path, ec);
  if (ec) throw ConfigError("rename " + temp.string() + ": " + ec.message());
  fsync_fd_path(path.has_parent_path() ? path.parent_path() : fs::path("."), O_RDONLY);
}

Config::Config(std::vector<fs::path> files) : files_(std::move(files)) {
  if (!files_.empty()) writable_ = files_.back();
  values_ = std::make_shared<const Sections>(read_files());
}

Sections Config::read_files() const {
  Sections merged;
  for (std::size_t i = 0; i < files_.size(); ++i) {
    const bool last = i + 1 == files_.size();
    if (last && !fs::exists(files_[i])) break;  // created when first written (tools, tests)
    for (auto& [section, keys] : parse_ini(read_file(files_[i]))) {
      for (auto& [key, value] : keys) merged[section][key] = std::move(value);
    }
  }
  return merged;
}

void Config::pin(const std::string& section, const std::string& key, const std::string& value) {
  set(section, key, value, /*persist=*/false);
  std::lock_guard lock(mutex_);
  pinned_[section][key] = value;
}

std::vector<Config::Change> Config::replace(Sections values) {
  std::lock_guard lock(mutex_);
  for (const auto& [section, keys] : pinned_) {
    for (const auto& [key, value] : keys) values[section][key] = value;
  }
  auto next = std::make_shared<const Sections>(std::move(values));
  std::vector<Change> changes;
  const auto value_in = [](const Sections& all, const std::string& section,
                           const std::string& key) -> std::optional<std::string> {
    const auto s = all.find(section);
    if (s == all.end()) return std::nullopt;
    const auto k = s->second.find(key);
    if (k == s->second.end()) return std::nullopt;
    return k->second;
  };
  for (const auto& [section, keys] : *next) {  // set or changed
    for (const auto& [key, value] : keys) {
      if (value_in(*values_, section, key) != value) changes.push_back(Change{section, key, value});
    }
  }
  for (const auto& [section, keys] : *values_) {  // removed
    for (const auto& [key, unused] : keys) {
      if (!value_in(*next, section, key)) changes.push_back(Change{section, key, std::nullopt});
    }
  }
  values_ = std::move(next);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return changes;
}

Config::Config(Sections values) : values_(std::make_shared<const Sections>(std::move(values))) {}

Config::Snapshot Config::snapshot() const {
  std::lock_guard lock(mutex_);
  return values_;
}

std::optional<std::string> Config::get(std::string_view section, std::string_view key) const {
  const Snapshot values = snapshot();
  const auto s = values->find(section);
  if (s == values->end()) return std::nullopt;
  const auto k = s->second.find(std::string(key));
  if (k == s->second.end()) return std::nullopt;
  return k->second;
}

std::optional<std::string> Config::set(const std::string& section, const std::string& key,
                                       const std::string& value, bool persist) {
  std::lock_guard lock(mutex_);
  if (persist && !writable_.empty()) save_to_file(writable_, section, key, value);
  auto next = std::make_shared<Sections>(*values_);
  auto& slot = (*next)[section];
  std::optional<std::string> old;
  if (const auto it = slot.find(key); it != slot.end()) old = it->second;
  slot[key] = value;
  values_ = std::move(next);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return old;
}

std::optional<std::string> Config::remove(const std::string& section, const std::string& key,
                                          bool persist) {
  std::lock_guard lock(mutex_);
  const auto s = values_->find(section);
  if (s == values_->end()) return std::nullopt;
  const auto k = s->second.find(key);
  if (k == s->second.end()) return std::nullopt;
  std::optional<std::string> old = k->second;
  if (persist && !writable_.empty()) save_to_file(writable_, section, key, std::nullopt);
  auto next = std::make_shared<Sections>(*values_);
  auto& slot = (*next)[section];
  slot.erase(key);
  if (slot.empty()) next->erase(section);
  values_ = std::move(next);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  return old;
}

}  // namespace chaise::config
