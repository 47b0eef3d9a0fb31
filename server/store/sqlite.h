// A small RAII layer over the SQLite C API: a connection and its prepared statements.
// Errors come back as absl::Status naming the SQL that failed; nothing throws.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct sqlite3;
struct sqlite3_stmt;

namespace fp8::server::store {

// A cached prepared statement in use. Resets it when it goes out of scope: a statement
// left mid-result would hold its read transaction open, and this connection would go on
// seeing a snapshot without the writes of other processes (fp8-coordinator token).
class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) { other.stmt_ = nullptr; }
  Statement& operator=(Statement&&) = delete;
  Statement(const Statement&) = delete;
  ~Statement();

  // Parameters count from 1, as in SQL's "?1".
  Statement& bind(int index, int64_t value);
  Statement& bind_double(int index, double value);
  Statement& bind(int index, std::string_view text);
  Statement& bind_blob(int index, std::string_view bytes);

  // One step: true when a row is ready to read, false when the statement is done.
  absl::StatusOr<bool> step();
  // Steps to the end (an INSERT, UPDATE or DELETE).
  absl::Status run();

  int64_t column_int(int column) const;
  double column_double(int column) const;
  std::string column_text(int column) const;
  std::string column_blob(int column) const;
  bool column_is_null(int column) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

class Database {
 public:
  // Opens (creating) the file in WAL mode with foreign keys on and a busy timeout, so a
  // second process reading the file (fp8-coordinator token ...) never fails at once.
  static absl::StatusOr<std::unique_ptr<Database>> open(const std::string& path);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs one or more statements with no parameters (schema, PRAGMA).
  absl::Status exec(std::string_view sql);

  // The statement for `sql`, prepared once and cached, reset with its bindings cleared.
  // Valid until the next call of query() with the same SQL.
  absl::StatusOr<Statement> query(const std::string& sql);

  // Runs `body` in one transaction: committed when it returns OK, rolled back otherwise.
  template <typename Body>
  absl::Status transaction(Body&& body) {
    if (absl::Status s = exec("BEGIN IMMEDIATE"); !s.ok()) return s;
    absl::Status s = body();
    if (!s.ok()) {
      exec("ROLLBACK").IgnoreError();
      return s;
    }
    return exec("COMMIT");
  }

  int64_t changes() const;
  const std::string& path() const { return path_; }

 private:
  Database(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_;
  std::string path_;
  std::map<std::string, sqlite3_stmt*, std::less<>> cache_;
};

}  // namespace fp8::server::store
