// tests/core/one_db_store.h — a GoogleTest fixture for core tests that need a real store: a fresh
// store in a temporary directory (fsync off) holding one database, "db", removed afterwards.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "core/db/databases.h"
#include "core/db/keyspace.h"
#include "storage/database.h"

namespace chaise::core {

class OneDbStore : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "chaise-core-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    storage::Options o;
    o.fsync = false;
    keyspace::set_store_options(o);
    store_ = std::move(storage::Database::open(dir_, o).value());
    storage::Status s = store_->run([&](storage::Transaction& tr) -> storage::Status {
      auto r = create_db(tr, "db", false, 1);
      if (!r.ok()) return r.error();
      return {};
    });
    ASSERT_TRUE(s.ok());
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // The database "db", opened in a transaction of its own.
  DbRef db() {
    auto tr = store_->create_transaction();
    auto r = open_db(tr, "db");
    EXPECT_TRUE(r.ok() && !failed(*r));
    return std::get<DbRef>(*r);
  }

  std::string dir_;
  std::unique_ptr<storage::Database> store_;
};

}  // namespace chaise::core
